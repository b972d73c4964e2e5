"""The lab's units and companion lessons, and their guides as HTML: the same README files
that `make unit` shows in a terminal (scenarios/*/README.md and README.ja.md)."""

import os
import sys
from pathlib import Path

from markdown_it import MarkdownIt

SCENARIOS = Path(os.environ.get("NIGHTJAR_SCENARIOS") or Path(__file__).resolve().parents[2] / "scenarios")
sys.path.insert(0, str(SCENARIOS))
from units.table import LESSONS, UNITS, heading  # noqa: E402  (scenarios/units: standard library only)
from guidetext import LANGUAGES  # noqa: E402  (README.md, README.ja.md)

# Raw HTML in a guide is shown as text, never passed through.
MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
HEADING_SHIFT = 2


class UnknownUnit(LookupError):
    pass


def catalogue():
    """{key: folder} for every unit and lesson, in the table's order: '1', '2', '3', 'cl-13-2', ..."""
    found = {str(unit.number): unit.path for unit in UNITS.values()}
    found.update({key: SCENARIOS / folder for key, folder in LESSONS.items()})
    return found


def folder_of(key):
    folder = catalogue().get(str(key))
    if folder is None:
        raise UnknownUnit(f"no lab unit {key!r}: the units are {', '.join(catalogue())}")
    return folder


def listing():
    """[{"key", "titles": {"en", "ja"}, "lesson"}] for the unit picker."""
    return [{"key": key, "lesson": not key.isdigit(),
             "titles": {lang: heading(folder / name) for lang, name in LANGUAGES.items()}}
            for key, folder in catalogue().items()]


def guide_html(key, lang, management=True):
    """A unit's guide in `lang` ('en' or 'ja') as HTML, as the console shows it (in_console):
    `management` false (the console's management port None) when it has no management UI to link to."""
    if lang not in LANGUAGES:
        raise UnknownUnit(f"no guide in {lang!r}: ja or en")
    text = (folder_of(key) / LANGUAGES[lang]).read_text(encoding="utf-8")
    tokens = in_console(MARKDOWN.parse(text), lang, management)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            # The page's own h1 and its "Guide" h2 come first: the guide's # is an h3.
            token.tag = f"h{min(int(token.tag[1]) + HEADING_SHIFT, 6)}"
    return MARKDOWN.renderer.render(tokens, MARKDOWN.options, {})


# ---- the guide where it is read: the console -----------------------------------------------
# The README serves every way of running the lab (`make unit` prints it whole). In the console
# the learner needs only the console's own: the blocks that set up a host's terminal go, and
# "Where things are" keeps its console column, the other ways one click away.

HOST_ONLY = ("cd workstation/ticket-desk", "source ../../.venv/bin/activate")
CONSOLE_COLUMN = "docker compose up"   # in the heading of the console's column, in both languages
OTHER_WAYS = {"en": "The other ways of running the lab (make up, make local)",
              "ja": "ラボのほかの動かし方(make up、make local)"}
NO_MANAGEMENT = {
    "en": "none in this lab (the console gives no link at the top): `python3 desk.py status` in the"
          " terminal shows the same counts, exactly",
    "ja": "このラボにはありません(ページ上部にリンクはありません)。端末で `python3 desk.py status`"
          " を実行すると、同じ件数が正確に表示されます"}


def host_only(token):
    lines = [line.strip() for line in token.content.splitlines() if line.strip()]
    return token.type == "fence" and bool(lines) and all(line in HOST_ONLY for line in lines)


def in_console(tokens, lang, management):
    kept, at = [], 0
    while at < len(tokens):
        token = tokens[at]
        if host_only(token):
            # With the paragraph right before it, which says where to type it (make local's).
            if len(kept) >= 3 and kept[-3].type == "paragraph_open" and "make local" in kept[-2].content:
                del kept[-3:]
        elif token.type == "table_open":
            end = next(i for i in range(at, len(tokens)) if tokens[i].type == "table_close")
            table = tokens[at:end + 1]
            heading = table[:next(i for i, t in enumerate(table) if t.type == "thead_close")]
            if any(CONSOLE_COLUMN in t.content for t in heading):
                kept += console_column(table, lang, management)
            else:
                kept += table
            at = end
        else:
            kept.append(token)
        at += 1
    return kept


def console_column(table, lang, management):
    """The table with its first two columns, then the whole table folded away."""
    kept, column, row_name = [], 0, ""
    for token in table:
        if token.type == "tr_open":
            column = 0
        if token.type in ("th_open", "td_open"):
            column += 1
        if token.type in ("th_open", "td_open", "inline", "th_close", "td_close") and column > 2:
            continue
        if token.type == "inline" and column == 1:
            row_name = token.content
        if token.type == "inline" and column == 2 and not management and "RabbitMQ" in row_name:
            token = MARKDOWN.parseInline(NO_MANAGEMENT[lang])[0]
        kept.append(token)
    whole = [html_block(f"<details class=\"other-ways\"><summary>{OTHER_WAYS[lang]}</summary>\n")]
    return kept + whole + table + [html_block("</details>\n")]


def html_block(text):
    from markdown_it.token import Token
    block = Token("html_block", "", 0)
    block.content = text  # the console's own words, never the guide's
    return block
