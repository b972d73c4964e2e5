"""The commands of ticket-desk/desk.py: register, status, retry, repair, history."""

import argparse
import sys
from dataclasses import dataclass

from .. import broker, db as database, history, history_render, queueing, registrations
from ..config import Settings, redact_url


class DeskError(Exception):
    """A refusal or failure, printed as one line; desk.py exits 1."""


def main(argv):
    parser = argparse.ArgumentParser(prog="desk.py", description="The Nightjar ticket desk.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    register = commands.add_parser("register", help="register a guest and queue the registration")
    register.add_argument("name", help="the guest's name")
    commands.add_parser("status", help="registrations, tickets, problems and the queue")
    retry = commands.add_parser("retry", help="queue a new delivery of an existing registration")
    retry.add_argument("id", help="registration ID, e.g. R-0003")
    repair = commands.add_parser(
        "repair", help="show (or with --apply, carry out) the repair of duplicate tickets of one ID")
    repair.add_argument("id", help="registration ID, e.g. R-0002")
    repair.add_argument("--apply", action="store_true", help="apply the plan in one transaction")
    story = commands.add_parser(
        "history", help="one registration's deliveries, step by step (no ID: which ones to look at)")
    story.add_argument("id", nargs="?", help="registration ID, e.g. R-0003")
    options = parser.parse_args(argv)

    sys.stdout.reconfigure(line_buffering=True)
    settings = Settings.from_env()
    db = database.connect(settings.db_path)
    try:
        if options.command == "register":
            return cmd_register(db, settings, options.name)
        if options.command == "status":
            return cmd_status(db, settings)
        if options.command == "retry":
            return cmd_retry(db, settings, options.id)
        if options.command == "history":
            return cmd_history(db, settings, options.id)
        return cmd_repair(db, options.id, options.apply)
    except (DeskError, broker.BrokerUnavailable) as error:
        print(error, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        db.close()


def cmd_register(db, settings, name):
    try:
        registration_id, queued = queueing.register(db, settings, name)
    except registrations.InvalidName as error:
        raise DeskError(str(error)) from None
    if queued:
        print(f"Registered {registration_id} and queued it.")
        return 0
    if queued is queueing.Outcome.UNCONFIRMED:
        print(f"Registered {registration_id}, but RabbitMQ at {redact_url(settings.amqp_url)} has not"
              f" confirmed it within {settings.confirm_seconds:g} s; it is saved, and the site queues it"
              " once RabbitMQ confirms.")
        return 1
    print(f"Registered {registration_id}, but RabbitMQ at {redact_url(settings.amqp_url)} did not take"
          " it now; the site queues it once RabbitMQ is back.")
    return 1


def cmd_retry(db, settings, registration_id):
    registration = _existing(db, registration_id)
    try:
        with queueing.publisher(settings) as channel:
            queueing.queue_registration(db, channel, settings, registration.id, registration.name)
    except queueing.ConfirmPending:
        print(f"Sent a new delivery of {registration.id}, but RabbitMQ at {redact_url(settings.amqp_url)}"
              f" has not confirmed it within {settings.confirm_seconds:g} s; it may still arrive.")
        return 1
    print(f"Queued a new delivery of {registration.id} ({registration.name}).")
    return 0


def cmd_status(db, settings):
    rows = registrations.all_registrations(db)
    print(f"Registrations ({len(rows)})")
    width = max([len(r.name) for r in rows] + [len("Guest name")])
    tickets_width = max([len(registrations.tickets_phrase(r.tickets)) for r in rows] + [14])
    # Completion key: a row in the completed table (unit 3's handler writes one per finished ID).
    print(f"  {'ID':<6}  {'Guest name':<{width}}  {'Tickets':<{tickets_width}}  Completion key")
    for r in rows:
        tickets = registrations.tickets_phrase(r.tickets)
        line = (f"  {r.id}  {r.name:<{width}}  {tickets:<{tickets_width}}"
                f"  {'yes' if r.completed else 'no':<14}")
        if r.problems:
            line += "  ! " + "; ".join(r.problems)
        print(line.rstrip())
    problems = sum(1 for r in rows if r.problems)
    print(f"{problems} with problems" if problems else "No problems")
    try:
        ready, dead = broker.queue_depths(settings)
    except broker.BrokerUnavailable as error:
        print(f"Queue {settings.queue}: unknown. {error}")
        return 1
    holding = held_by_workers(settings)
    why_not = None
    if holding is not None:  # exact and current: what the lab's workers hold right now
        held = f"{len(holding)} unacknowledged, "
    else:
        try:
            held = (f"{broker.unacknowledged_count(settings)} unacknowledged (RabbitMQ's statistics,"
                    " which can be several seconds old), ")
        except broker.NotCounted as reason:
            held, why_not = "", reason
    print(f"Queue {settings.queue}: {ready} ready, {held}{dead} dead-lettered"
          f" (in {settings.dead_letter_queue})")
    for delivery, paused in holding or []:
        print(f"  {delivery.id} is held by worker.py (pid {delivery.worker})"
              + (f", paused at {paused}" if paused else "") + ": not acknowledged yet")
    if why_not:
        print(f"Unacknowledged deliveries: the RabbitMQ management API {why_not}; set"
              " NIGHTJAR_MANAGEMENT_URL, or run rabbitmqctl list_queues name"
              " messages_unacknowledged on the broker's machine.")
    return 0


def cmd_history(db, settings, registration_id):
    registration = _existing(db, registration_id) if registration_id else None
    path = history.store_path(settings.db_path)
    if path is None:
        print(f"The delivery history is off ({history.ENV}=off): nothing is recorded.")
        return 0
    try:
        stored = history.read(path, registration.id if registration else None)
    except OSError as error:
        raise DeskError(f"The delivery history at {path} cannot be read"
                        f" ({error.strerror or error}).") from None
    if registration is None:
        return list_histories(db, stored, path)
    told = history_render.story(registration, stored)
    print(f"Delivery history of {registration.id} ({registration.name}):"
          f" {history_render.deliveries_phrase(told.deliveries)},"
          f" {registrations.tickets_phrase(registration.tickets)}")
    if not told.deliveries:
        print(f"No delivery of {registration.id} is recorded in {path}.")
    for line in told.lines() + told.notes():
        print(line)
    return 0


def list_histories(db, stored, path):
    """desk.py history without an ID: the registrations whose story is worth reading."""
    rows = []
    for r in registrations.all_registrations(db):
        count = len(stored.of(r.id)) + (stored.trimmed[r.id].deliveries if r.id in stored.trimmed else 0)
        if count > 1 or len(r.tickets) > 1:
            rows.append((r, history_render.deliveries_phrase(count)))
    if rows:
        print(f"Registrations with more than one delivery or more than one ticket ({len(rows)})")
        name_width = max(len(r.name) for r, _ in rows)
        count_width = max(len(count) for _, count in rows)
        for r, count in rows:
            print(f"  {r.id}  {r.name:<{name_width}}  {count:<{count_width}}"
                  f"  {registrations.tickets_phrase(r.tickets)}")
        print(f"One registration's story: python3 desk.py history {rows[0][0].id}")
    else:
        print("No registration has more than one delivery or more than one ticket.")
    if stored.damaged:
        print(f"{history_render.deliveries_phrase(stored.damaged, 'damaged record')} in the history skipped.")
    print(f"The delivery history ({path}) keeps the last {history.PER_REGISTRATION} deliveries of"
          f" each registration and the last {history.OVERALL} in all.")
    return 0


def held_by_workers(settings):
    """The deliveries the lab's workers hold now (from the delivery history); None when it cannot say."""
    path = history.store_path(settings.db_path)
    if path is None:
        return None
    try:
        return history.held_now(history.read(path))
    except OSError:
        return None


@dataclass
class RepairPlan:
    registration: registrations.Registration
    keep: registrations.Ticket
    extra: list
    record_completed: bool

    def describe(self):
        r = self.registration
        lines = [f"Repair plan for {r.id} ({r.name}):",
                 f"  keep ticket {self.keep.number} (the first original ticket)"]
        if self.extra:
            lines.append("  delete " + registrations.tickets_phrase(self.extra, "extra ticket"))
        else:
            lines.append("  no extra tickets to delete")
        if self.record_completed:
            lines.append(f"  record {r.id} as completed (this ID only)")
        else:
            lines.append(f"  {r.id} is already recorded as completed")
        return lines

    @property
    def changes_anything(self):
        return bool(self.extra) or self.record_completed


def plan_repair(db, registration_id):
    registration = _existing(db, registration_id)
    if not registration.tickets:
        raise DeskError(f"{registration.id} has no ticket: there is nothing to keep, so it is not"
                        " repaired. Let the worker process it.")
    mismatched = [t for t in registration.tickets if t.name != registration.name]
    if mismatched:
        carry = "carries" if len(mismatched) == 1 else "carry"
        raise DeskError(f"{registration.id} is registered as {registration.name!r} but"
                        f" {registrations.tickets_phrase(mismatched)} {carry} another name;"
                        " not repaired, look at it by hand.")
    keep, *extra = registration.tickets
    return RepairPlan(registration, keep, extra, not registration.completed)


def cmd_repair(db, registration_id, apply):
    if not apply:
        plan = plan_repair(db, registration_id)
        for line in plan.describe():
            print(line)
        if plan.changes_anything:
            print(f"Nothing has changed yet. To apply this plan:"
                  f" python3 desk.py repair {plan.registration.id} --apply")
        else:
            print("Nothing to repair.")
        return 0
    # Plan and apply under one write lock, so the plan shown is the one applied.
    db.execute("BEGIN IMMEDIATE")
    try:
        plan = plan_repair(db, registration_id)
        db.executemany("DELETE FROM tickets WHERE number = ? AND registration_id = ?",
                       [(t.number, plan.registration.id) for t in plan.extra])
        db.execute("INSERT OR IGNORE INTO completed (id) VALUES (?)", (plan.registration.id,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    for line in plan.describe():
        print(line)
    print("Applied." if plan.changes_anything else "Nothing to repair.")
    return 0


def _existing(db, registration_id):
    registration = registrations.get(db, registration_id.strip().upper())
    if registration is None:
        raise DeskError(f"Unknown registration {registration_id}: see python3 desk.py status.")
    return registration
