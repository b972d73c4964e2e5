"""What several of the lab units' modules share: the lab's paths, say(), Stop and plural()."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "scenarios"
TICKET_DESK = ROOT / "ticket-desk"
STARTING_HANDLER = TICKET_DESK / "handler.py"
UNIT2_HANDLER = SCENARIOS / "unit2-ack-after-commit" / "solution" / "handler.py"
UNIT3_HANDLER = SCENARIOS / "unit3-idempotent-results" / "solution" / "handler.py"
BACKUPS = ".backups"


def say(line=""):
    print(line, flush=True)


class Stop(Exception):
    """Setup or solve cannot go on; the text says why."""


def plural(n, word):
    return f"{n} {word}" + ("" if n == 1 else "s")
