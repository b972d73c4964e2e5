"""The lab's table of contents: its three units, the companion lessons, and finding one by name."""

from dataclasses import dataclass
from pathlib import Path

from .common import SCENARIOS, STARTING_HANDLER, UNIT2_HANDLER, Stop, say


@dataclass(frozen=True)
class Unit:
    number: int
    folder: str
    start_handler: Path   # handler.py at the unit's start
    start_guests: tuple   # guests after Mina Patel at the start, each with one ticket
    goal_guests: tuple    # guests that must each have exactly one ticket when done
    done: str             # the success line

    @property
    def path(self):
        return SCENARIOS / self.folder

    @property
    def title(self):
        return heading(self.path / "README.md")

    def title_in(self, lang):
        """The title of the guide in that language ('ja': README.ja.md's)."""
        return heading(self.path / ("README.ja.md" if lang == "ja" else "README.md"))


UNITS = {
    1: Unit(1, "unit1-trace-registration", STARTING_HANDLER, (), ("Normal guest", "Lost guest"),
            "Unit 1 done: Normal guest and Lost guest each have one ticket in their name,"
            " Mina Patel's ticket is intact, and nothing is waiting."),
    2: Unit(2, "unit2-ack-after-commit", STARTING_HANDLER, ("Normal guest",),
            ("Normal guest", "Retry guest"),
            "Unit 2 done: handler.py acknowledges after the commit, Retry guest has one"
            " ticket, and nothing is waiting."),
    3: Unit(3, "unit3-idempotent-results", UNIT2_HANDLER, ("Normal guest", "Retry guest"),
            ("Normal guest", "Retry guest", "Same name", "Same name"),
            "Unit 3 done: handler.py is idempotent, both Same name registrations have one"
            " ticket each, and nothing is waiting."),
}
LESSONS = {"cl-13-2": "cl-13-2-queue-redelivery", "cl-13-3": "cl-13-3-delivery-resume"}


def heading(readme, short=False):
    """The first line of a guide without its '# ' (short: also without 'Unit 1 · ')."""
    try:
        title = readme.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    except (OSError, IndexError):
        return readme.parent.name
    return title.split(" · ", 1)[-1] if short else title


def find(name):
    """A Unit, or the folder of a companion lesson, from 2, unit2, unit2-ack-after-commit, cl-13-2, ..."""
    key = str(name).strip().lower()
    for unit in UNITS.values():
        if key in (str(unit.number), f"unit{unit.number}", unit.folder):
            return unit
    for short, folder in LESSONS.items():
        if key in (short, folder):
            return SCENARIOS / folder
    raise Stop(f"no lab unit {name!r}: see make units")


def list_units():
    say("The Nightjar ticket-desk lab. Each unit starts on its own.")
    say()
    for unit in UNITS.values():
        say(f"  N={unit.number:<8} {unit.title} / {heading(unit.path / 'README.ja.md', short=True)}")
        say(f"  {'':<10} scenarios/{unit.folder}/")
    say()
    say("Companion lessons (deterministic SQLite models, no broker):")
    for short, folder in LESSONS.items():
        path = SCENARIOS / folder
        say(f"  N={short:<8} {heading(path / 'README.md')} / {heading(path / 'README.ja.md', short=True)}")
        say(f"  {'':<10} scenarios/{folder}/")
    say()
    say("Start a unit: make unit N=2 (sets it up, shows its guide). Then: make check-unit N=2,"
        " make solve-unit N=2")
    return 0
