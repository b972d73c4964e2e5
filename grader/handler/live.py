"""The learner's live results, read without changing anything.

The live database is opened read-only (SQLite `mode=ro`: it works on the
WAL database while the site and worker use it, and cannot write a byte of
the database or its WAL; see read_registrations). The live queue's depth comes from a passive
queue_declare on the live queue only: nothing is declared, consumed,
acknowledged or repaired.
"""

import sqlite3

import pika.exceptions

from nightjar import broker, db as database, registrations
from nightjar.config import redact_url

from .findings import Result

TICKETS_NAME = "Live results: every registration has exactly one ticket with its own name"
QUEUE_NAME = "Live queue: nothing is waiting"

WORKER_HINT = ("Run python3 worker.py --drain in the Workstation once handler.py is fixed"
               " (unit 3 \"Repeat database results safely\").")
DEAD_LETTER_HINT = ("python3 desk.py status shows which registrations still wait; once handler.py"
                    " is fixed, python3 desk.py retry ID queues each of them again (unit 2"
                    " \"Acknowledge only completed work\").")
REPAIR_HINT = ("Fix handler.py first, then python3 desk.py repair ID (preview) and"
               " --apply for each ID with duplicate tickets (unit 3 \"Repeat database results"
               " safely\").")


def read_registrations(db_path):
    """Every live registration with its tickets, read without writing a byte."""
    return database.read_without_writing(db_path, registrations.all_registrations)


def check_tickets(db_path):
    try:
        rows = read_registrations(db_path)
    except FileNotFoundError as error:
        return Result(TICKETS_NAME, False,
                      f"Cannot read the live database at {db_path}: {error}",
                      "Run the lab (make local) and the worker first, or pass --live-db PATH"
                      " (--skip-live grades handler.py alone).")
    except sqlite3.Error as error:
        return Result(TICKETS_NAME, False, f"Cannot read the live database at {db_path}: {error}",
                      "Pass the lab's database with --live-db PATH.")
    problems = [r for r in rows if r.problems]
    if not problems:
        return Result(TICKETS_NAME, True,
                      f"Every registration ({len(rows)}) has exactly one ticket carrying its own"
                      " name")
    listed = "; ".join(f"{r.id} ({r.name}): {', '.join(r.problems)}" for r in problems[:4])
    if len(problems) > 4:
        listed += f"; and {len(problems) - 4} more"
    duplicates = any(len(r.tickets) > 1 for r in problems)
    return Result(TICKETS_NAME, False, f"{len(problems)} of {len(rows)} registrations need"
                  f" attention: {listed}", REPAIR_HINT if duplicates else WORKER_HINT)


def _depth(connection, queue):
    """Ready messages in a queue by a passive declare, or None when it does not exist."""
    channel = connection.channel()
    try:
        return channel.queue_declare(queue, passive=True).method.message_count
    except pika.exceptions.ChannelClosedByBroker as error:
        if error.reply_code == 404:
            return None
        raise
    finally:
        if channel.is_open:
            channel.close()


def check_queue(settings):
    """Ready messages in the live queue and its dead-letter queue (passive declares: nothing is consumed)."""
    try:
        connection = broker.connect(settings)
    except broker.BrokerUnavailable as error:
        return Result(QUEUE_NAME, False, f"Cannot read the live queue: {error}",
                      "Start the lab (make local) so its RabbitMQ answers, or use --skip-live.")
    try:
        ready = _depth(connection, settings.queue)
        dead = _depth(connection, settings.dead_letter_queue) if ready is not None else None
    except pika.exceptions.AMQPError as error:
        return Result(QUEUE_NAME, False, f"Cannot read the live queue {settings.queue}: {error!r}",
                      "Check NIGHTJAR_AMQP_URL and NIGHTJAR_QUEUE, or use --skip-live.")
    finally:
        if connection.is_open:
            connection.close()
    if ready is None:
        return Result(QUEUE_NAME, True, f"Queue {settings.queue} does not exist on"
                      f" {redact_url(settings.amqp_url)}: nothing is waiting")
    if ready:
        return Result(QUEUE_NAME, False,
                      f"{ready} registration(s) wait in queue {settings.queue}", WORKER_HINT)
    if dead:
        return Result(QUEUE_NAME, False,
                      f"{dead} message(s) were dead-lettered into {settings.dead_letter_queue}:"
                      " RabbitMQ will not deliver them again", DEAD_LETTER_HINT)
    return Result(QUEUE_NAME, True, f"Queue {settings.queue} has no ready messages and nothing"
                  " was dead-lettered")


def check(settings, read_queue=True):
    """[Result] for the live database and (unless read_queue is False) the live queue.

    Without the queue, a registration still waiting for its ticket fails the
    database check all the same; only stray messages go unseen.
    """
    results = [check_tickets(settings.db_path)]
    if read_queue:
        results.append(check_queue(settings))
    return results
