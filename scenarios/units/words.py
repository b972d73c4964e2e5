"""The lines ./setup prints, in the learner's language (English, or Japanese when the guide is Japanese).

setup() calls use(lang) first; line(name, ...) fills in the template. The
site's labels and the program names stay English in both, as in the guides.
"""

from nightjar import registrations

from .common import plural

LINES = {
    "en": {
        "setting_up": "Setting up {title}",
        "workstation_created": "Workstation {folder}: created as a copy of ticket-desk/",
        "workstation": "Workstation {folder}:",
        "tool_missing": "  {tool}: was missing, restored from ticket-desk/",
        "tool_restored": "  {tool}: differed from ticket-desk/{tool}; restored (your copy: {saved})",
        "handler_kept": "  handler.py: already the unit's starting version",
        "handler_saved": "  handler.py: your version is saved as {saved}",
        "handler_replaced": "  handler.py: replaced with the unit's starting version ({which})",
        "starting_handler": "it acknowledges before writing the ticket",
        "unit2_handler": "unit 2's: it acknowledges after the commit",
        "database_already": "Database {path}: already at the unit's start",
        "database_created": "Database {path}: created at the unit's start",
        "database_reset": "Database {path}: reset to the unit's start (it held {registrations},"
                          " {tickets} and {completed})",
        "your_copy": "  your copy: {saved}",
        "registration": "  {id}  {name}: {tickets}",
        "history_cleared": "Delivery history {path}: cleared (it held {deliveries})",
        "queue_emptied": "Queue {queue}: removed {waiting}; nothing is queued now",
        "queue_empty": "Queue {queue}: nothing queued",
        "dead_emptied": "Dead-letter queue {queue}: removed {dead}",
        "ready": "Ready. The guide follows: {guide} (日本語: {other}; NIGHTJAR_LANG=ja or en chooses)",
        "ready_again": "Ready: the guide above is {guide}.{where}",
        "ready_beside": "Ready: the guide is {guide}.{where}",
        "where": " Workstation: {opened}",
    },
    "ja": {
        "setting_up": "{title} を準備します",
        "workstation_created": "Workstation {folder}: ticket-desk/ のコピーとして作成しました",
        "workstation": "Workstation {folder}:",
        "tool_missing": "  {tool}: なかったため ticket-desk/ から戻しました",
        "tool_restored": "  {tool}: ticket-desk/{tool} と違っていたため戻しました (元のファイル: {saved})",
        "handler_kept": "  handler.py: すでにこの単元の開始時の版です",
        "handler_saved": "  handler.py: あなたの版を {saved} に保存しました",
        "handler_replaced": "  handler.py: この単元の開始時の版に置き換えました ({which})",
        "starting_handler": "券を書く前に確認する版",
        "unit2_handler": "単元2の版: コミット後に確認する版",
        "database_already": "データベース {path}: すでにこの単元の開始状態です",
        "database_created": "データベース {path}: この単元の開始状態で作成しました",
        "database_reset": "データベース {path}: この単元の開始状態に戻しました (登録 {registrations} 件、"
                          "券 {tickets} 枚、完了記録 {completed} 件がありました)",
        "your_copy": "  元のデータ: {saved}",
        "registration": "  {id}  {name}: {tickets}",
        "history_cleared": "配信履歴 {path}: 消去しました (配信 {deliveries} 件がありました)",
        "queue_emptied": "キュー {queue}: 待機中のメッセージ {waiting} 件を削除しました。キューは空です",
        "queue_empty": "キュー {queue}: 空です",
        "dead_emptied": "デッドレターキュー {queue}: メッセージ {dead} 件を削除しました",
        "ready": "準備ができました。ガイドは次のとおりです: {guide} (English: {other}。NIGHTJAR_LANG=ja"
                 " または en で選べます)",
        "ready_again": "準備完了: 上のガイドは {guide} です。{where}",
        "ready_beside": "準備完了: ガイドは {guide} です。{where}",
        "where": "Workstation: {opened}",
    },
}

_lang = "en"


def use(lang):
    """Print setup's lines in `lang` ("en" or "ja") from now on."""
    global _lang
    _lang = lang


def japanese():
    return _lang == "ja"


def line(key, /, **fields):
    return LINES[_lang][key].format(**fields)


def count(n, word):
    """'3 tickets' in English, '3' in Japanese (its template says 件 or 枚)."""
    return str(n) if japanese() else plural(n, word)


def tickets(found):
    """registrations.tickets_phrase in English ('tickets 2, 3'); '券 2, 3' or '券なし' in Japanese."""
    if not japanese():
        return registrations.tickets_phrase(found)
    return "券 " + ", ".join(str(t.number) for t in found) if found else "券なし"
