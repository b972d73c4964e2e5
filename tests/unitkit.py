"""What the unit tests share: a live lab of a test's own for the units' scripts, and the units' transcripts' normal forms."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import Lab, ticket_rows
from nightjar import db as database, registrations

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
FOLDERS = {1: "unit1-trace-registration", 2: "unit2-ack-after-commit", 3: "unit3-idempotent-results"}
sys.path.insert(0, str(SCENARIOS))
import guidetext  # noqa: E402  (scenarios/guidetext.py: the guide as the terminal shows it)


class UnitEnv(Lab):
    """A live lab of one's own: NIGHTJAR_DB, NIGHTJAR_QUEUE and NIGHTJAR_WORKSTATION in a temp folder
    (a harness Lab whose Workstation folder the unit's ./setup creates)."""

    def __init__(self, tmp):
        super().__init__(tmp, workstation=tmp / "ws" / "ticket-desk", queue_prefix="test.units")
        self.extra_env.update(NIGHTJAR_WORKSTATION=str(self.workstation),
                              NIGHTJAR_LOCAL_VAR=str(tmp / "var"))

    @property
    def env(self):
        # The guide's language follows the locale: English unless a test says otherwise.
        env = {k: v for k, v in super().env.items() if k not in ("LC_ALL", "LC_MESSAGES")}
        return dict(env, LANG="C.UTF-8")

    def script(self, unit, action, **env):
        """Run a unit's ./setup, ./check or ./solve; (exit status, normalised stdout)."""
        result = subprocess.run([sys.executable, str(SCENARIOS / FOLDERS[unit] / action)],
                                env=dict(self.env, **env), cwd=ROOT, capture_output=True, text=True,
                                timeout=120)
        assert result.stderr == "", result.stderr
        return result.returncode, self.normalise(result.stdout)

    def normalise(self, text):
        text = text.replace(str(self.tmp), "<tmp>").replace(self.queue, "<queue>")
        return re.sub(r"-\d{8}-\d{6}(-\d+)?\.", "-<stamp>.", text)


@pytest.fixture
def unit_env(tmp_path):
    env = UnitEnv(tmp_path)
    yield env
    env.cleanup()


def ready_line(unit, lang="en"):
    """Setup's last lines: the guide as plain text, then where to go next."""
    folder = f"scenarios/{FOLDERS[unit]}/"
    guide = "README.ja.md" if lang == "ja" else "README.md"
    shown = guidetext.as_plain_text((SCENARIOS / FOLDERS[unit] / guide).read_text(encoding="utf-8"))
    if lang == "ja":
        return (f"準備ができました。ガイドは次のとおりです: {folder}README.ja.md (English:"
                f" {folder}README.md。NIGHTJAR_LANG=ja または en で選べます)\n\n" + shown + "\n"
                f"準備完了: 上のガイドは {folder}README.ja.md です。Workstation: cd <tmp>/ws/ticket-desk\n")
    return (f"Ready. The guide follows: {folder}README.md (日本語: {folder}README.ja.md;"
            " NIGHTJAR_LANG=ja or en chooses)\n\n" + shown + "\n"
            f"Ready: the guide above is {folder}README.md. Workstation: cd <tmp>/ws/ticket-desk\n")


def history_times(text):
    """desk.py history's times (+31.2 s) as +<t> s, with the two spaces after them."""
    return re.sub(r"^\+\d+\.\d s +", "+<t> s  ", text, flags=re.M)


def tickets(env):
    """(number, registration ID, name) of every ticket in the unit's database."""
    return ticket_rows(database.read_without_writing(env.db_path, registrations.all_tickets))
