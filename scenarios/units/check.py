"""./check: what a unit still lacks, from the handler's trials and the live database and queue."""

from pathlib import Path

import guidetext  # scenarios/guidetext.py: the guide, in the learner's language
from nightjar import broker, db as database, registrations
from nightjar.config import Settings, workstation_folder

from .common import plural, say
from .setup import guide
from .trials import TRIALS, try_handler

# Exit statuses of ./check: 0 done, NOT_DONE, COULD_NOT (e.g. RabbitMQ is down).
NOT_DONE, COULD_NOT = 1, 2
FIRST_GUEST = "Mina Patel"  # R-0001, seeded with ticket 1 (nightjar/db.py)


def live_problems(unit, settings):
    """Lines for what the live database and queue still lack."""
    path = Path(settings.db_path)
    if not path.is_file():
        return [f"missing: the live database at {path} (make unit N={unit.number} creates it)"]
    rows = database.read_without_writing(path, registrations.all_registrations)
    lines = []
    first = next((r for r in rows if r.id == "R-0001"), None)
    if (first is None or first.name != FIRST_GUEST or len(first.tickets) != 1
            or first.tickets[0].name != FIRST_GUEST):
        lines.append(f"missing: {FIRST_GUEST}'s ticket (R-0001 with exactly one ticket in her name)")
    for name in dict.fromkeys(unit.goal_guests):
        wanted = unit.goal_guests.count(name)
        good = [r for r in rows if r.name == name and len(r.tickets) == 1
                and r.tickets[0].name == name]
        if len(good) < wanted:
            if wanted == 1:
                lines.append(f"missing: a registration named {name} with one ticket")
            else:
                lines.append(f"missing: {count_word(wanted)} registrations named {name},"
                             " each with one ticket")
    for r in rows:
        if r.problems and r.id != "R-0001":
            lines.append(f"problem: {r.id} ({r.name}) {'; '.join(r.problems)}")
    ready, dead = broker.queue_depths(settings)
    if ready:
        lines.append(f"missing: an empty queue ({plural(ready, 'message')} still waiting in"
                     f" {settings.queue}: python3 worker.py --drain)")
    if dead:
        lines.append(f"problem: {plural(dead, 'message')} set aside in the dead-letter queue"
                     f" {settings.dead_letter_queue} (python3 desk.py status)")
    return lines


def count_word(n):
    return {2: "two", 3: "three"}.get(n, str(n))


def check(unit):
    settings = Settings.from_env()
    lines = []
    if unit.number in TRIALS:
        handler = workstation_folder() / "handler.py"
        if not handler.is_file():
            lines.append(f"missing: handler.py in the Workstation folder {handler.parent}"
                         f" (make unit N={unit.number} puts one there)")
        else:
            lines += try_handler(TRIALS[unit.number], handler, settings)
    lines += live_problems(unit, settings)
    if lines:
        for line in lines:
            say(line)
        say(f"Unit {unit.number} is not done yet. The guide: {guide(unit.path, guidetext.language())}")
        return NOT_DONE
    say(unit.done)
    return 0
