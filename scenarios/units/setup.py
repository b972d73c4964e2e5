"""./setup: bring the live lab to a unit's start (Workstation folder, database, queue), then show its guide."""

import os
import shlex
import shutil

import guidetext  # scenarios/guidetext.py: the guide, in the learner's language
from nightjar import broker, history
from nightjar.history_render import deliveries_phrase

from . import words
from nightjar.config import Settings, workstation_folder
from nightjar.harness.lab import WORKSTATION_PROGRAMS, copy_workstation

from .backups import backup
from .common import BACKUPS, ROOT, STARTING_HANDLER, TICKET_DESK, say
from .database import prepare_database


def prepare_workstation(unit, folder):
    """Create or refresh the Workstation folder and put the unit's handler.py in place."""
    backups = folder / BACKUPS
    created = not folder.exists()
    if created:
        copy_workstation(folder)  # the programs and the starting handler.py
        say(words.line("workstation_created", folder=folder))
    else:
        say(words.line("workstation", folder=folder))
    for tool in WORKSTATION_PROGRAMS:
        mine, original = folder / tool, TICKET_DESK / tool
        if not mine.exists():
            shutil.copyfile(original, mine)
            say(words.line("tool_missing", tool=tool))
        elif mine.read_bytes() != original.read_bytes():
            saved = backup(mine, backups)
            shutil.copyfile(original, mine)
            say(words.line("tool_restored", tool=tool, saved=saved))
    handler = folder / "handler.py"
    wanted = unit.start_handler.read_bytes()
    if handler.exists() and handler.read_bytes() == wanted:
        say(words.line("handler_kept"))
    else:
        if handler.exists() and not created:
            saved = backup(handler, backups)
            say(words.line("handler_saved", saved=saved))
        handler.write_bytes(wanted)
        say(words.line("handler_replaced", which=start_handler_name(unit)))


def start_handler_name(unit):
    return words.line("starting_handler" if unit.start_handler == STARTING_HANDLER else "unit2_handler")


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
        say(words.line("queue_emptied", queue=settings.queue, waiting=words.count(waiting, "waiting message")))
    else:
        say(words.line("queue_empty", queue=settings.queue))
    if dead:
        say(words.line("dead_emptied", queue=settings.dead_letter_queue, dead=words.count(dead, "message")))


def prepare_history(settings):
    """The delivery history starts again with the database (the IDs it tells of are gone)."""
    path = history.store_path(settings.db_path)
    cleared = history.clear(path)
    if cleared:
        shown = str(cleared) if words.japanese() else deliveries_phrase(cleared)
        say(words.line("history_cleared", path=path, deliveries=shown))


def guide(unit_path, lang="en"):
    return guidetext.guide_file(unit_path, lang).relative_to(ROOT)


def ready(folder, lang, workstation_folder=None):
    """The last lines of a setup: the guide itself (unless NIGHTJAR_GUIDE=off), then where to go next."""
    words.use(lang)
    where = ""
    if workstation_folder:  # in containers, compose.yaml tells how the learner opens it: make shell
        opened = os.environ.get("NIGHTJAR_OPEN_WORKSTATION") or f"cd {shlex.quote(str(workstation_folder))}"
        where = words.line("where", opened=opened)
    if os.environ.get("NIGHTJAR_GUIDE") == "off":  # the lab console shows the guide beside these lines
        say(words.line("ready_beside", guide=guide(folder, lang), where=where))
        return
    other = "ja" if lang == "en" else "en"
    say(words.line("ready", guide=guide(folder, lang), other=guide(folder, other)))
    say()
    guidetext.show(folder, lang)
    say()
    say(words.line("ready_again", guide=guide(folder, lang), where=where))


def setup(unit):
    lang = guidetext.language()  # a bad NIGHTJAR_LANG stops setup before it changes anything
    words.use(lang)
    settings = Settings.from_env()
    folder = workstation_folder()
    say(words.line("setting_up", title=unit.title_in(lang)))
    # Reach RabbitMQ before changing anything, so a stopped broker changes nothing.
    broker.connect(settings).close()
    prepare_workstation(unit, folder)
    prepare_database(unit, settings, folder / BACKUPS)
    prepare_history(settings)
    prepare_queue(settings)
    ready(unit.path, lang, folder)
    return 0
