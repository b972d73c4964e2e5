"""./setup: bring the live lab to a unit's start (Workstation folder, database, queue), then show its guide."""

import shlex
import shutil

import guidetext  # scenarios/guidetext.py: the guide, in the learner's language
from nightjar import broker, history
from nightjar.stories import deliveries_phrase
from nightjar.config import Settings, workstation_folder
from nightjar.harness.lab import WORKSTATION_PROGRAMS, copy_workstation

from .backups import backup
from .common import BACKUPS, ROOT, STARTING_HANDLER, TICKET_DESK, plural, say
from .database import prepare_database


def prepare_workstation(unit, folder):
    """Create or refresh the Workstation folder and put the unit's handler.py in place."""
    backups = folder / BACKUPS
    created = not folder.exists()
    if created:
        copy_workstation(folder)  # the programs and the starting handler.py
        say(f"Workstation {folder}: created as a copy of ticket-desk/")
    else:
        say(f"Workstation {folder}:")
    for tool in WORKSTATION_PROGRAMS:
        mine, original = folder / tool, TICKET_DESK / tool
        if not mine.exists():
            shutil.copyfile(original, mine)
            say(f"  {tool}: was missing, restored from ticket-desk/")
        elif mine.read_bytes() != original.read_bytes():
            saved = backup(mine, backups)
            shutil.copyfile(original, mine)
            say(f"  {tool}: differed from ticket-desk/{tool}; restored (your copy: {saved})")
    handler = folder / "handler.py"
    wanted = unit.start_handler.read_bytes()
    if handler.exists() and handler.read_bytes() == wanted:
        say("  handler.py: already the unit's starting version")
    else:
        if handler.exists() and not created:
            saved = backup(handler, backups)
            say(f"  handler.py: your version is saved as {saved}")
        handler.write_bytes(wanted)
        say(f"  handler.py: replaced with the unit's starting version ({start_handler_name(unit)})")


def start_handler_name(unit):
    if unit.start_handler == STARTING_HANDLER:
        return "it acknowledges before writing the ticket"
    return "unit 2's: it acknowledges after the commit"


def prepare_queue(settings):
    connection = broker.connect(settings)
    try:
        channel = connection.channel()
        broker.declare_queues(channel, settings)
        waiting = channel.queue_purge(settings.queue).method.message_count
        dead = channel.queue_purge(settings.dead_letter_queue).method.message_count
    finally:
        connection.close()
    if waiting:
        say(f"Queue {settings.queue}: removed {plural(waiting, 'waiting message')}; nothing is queued now")
    else:
        say(f"Queue {settings.queue}: nothing queued")
    if dead:
        say(f"Dead-letter queue {settings.dead_letter_queue}: removed {plural(dead, 'message')}")


def prepare_history(settings):
    """The delivery history starts again with the database (the IDs it tells of are gone)."""
    path = history.store_path(settings.db_path)
    cleared = history.clear(path)
    if cleared:
        say(f"Delivery history {path}: cleared (it held {deliveries_phrase(cleared)})")


def guide(unit_path, lang="en"):
    return guidetext.guide_file(unit_path, lang).relative_to(ROOT)


def ready(folder, lang, workstation_folder=None):
    """The last lines of a setup: the guide itself, then where to go next."""
    other = "ja" if lang == "en" else "en"
    say(f"Ready. The guide follows: {guide(folder, lang)} ({'日本語' if other == 'ja' else 'English'}:"
        f" {guide(folder, other)}; NIGHTJAR_LANG=ja or en chooses)")
    say()
    guidetext.show(folder, lang)
    say()
    where = f" Workstation: cd {shlex.quote(str(workstation_folder))}" if workstation_folder else ""
    say(f"Ready: the guide above is {guide(folder, lang)}.{where}")


def setup(unit):
    lang = guidetext.language()  # a bad NIGHTJAR_LANG stops setup before it changes anything
    settings = Settings.from_env()
    folder = workstation_folder()
    say(f"Setting up {unit.title}")
    # Reach RabbitMQ before changing anything, so a stopped broker changes nothing.
    broker.connect(settings).close()
    prepare_workstation(unit, folder)
    prepare_database(unit, settings, folder / BACKUPS)
    prepare_history(settings)
    prepare_queue(settings)
    ready(unit.path, lang, folder)
    return 0
