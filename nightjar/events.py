"""What a worker run did, as machine-readable events: the contract between worker and grader.

When the environment variable NIGHTJAR_EVENTS names a file, the worker
appends one JSON object per line to it, each written with a single
os.write() so a line survives the process being killed right after it.
When NIGHTJAR_EVENTS is unset nothing is written and nothing changes on the
terminal. Only the grader sets it; it decides from these events, exit
statuses, the databases and the queues, never from what a run printed.

Every object has "event" (its kind); the other fields by kind:

    received           id, name, redelivered, tag  a valid job was taken from the queue
    returned           id                          handle() returned
    raised             id, type, message, where    handle() raised (where: "handler.py:LINE" or "")
    load-failed        type, message, where        handler.py could not be imported
    ack                tag, multiple               basic_ack reached RabbitMQ
    nack               tag, multiple, requeue      basic_nack reached RabbitMQ
    reject             tag, requeue                basic_reject reached RabbitMQ
    double-ack         tag                         a second ack of one delivery, refused
    no-ack             id                          handle() returned without settling it
    transaction-open   id                          handle() left a transaction open (rolled back)
    paused             point                       checkpoint() stopped at the --pause point
    pause-not-reached  id, point                   the --pause checkpoint never came
    connection-lost    during, type, message       RabbitMQ's connection or channel went away

The grader's own watcher (nightjar/harness/effects.py) adds, to the same file:

    before-write       table       the first statement that writes to the database
    before-commit                  the commit of a transaction that changed the tickets
    after-commit                   that commit has finished
    before-ack         tag         a basic_ack is about to be sent to RabbitMQ
    stop               effect      the watcher kills the worker at this effect

The worker's delivery history (nightjar/history.py) hears the same events
in the worker's process, whether or not NIGHTJAR_EVENTS is set, and keeps
them per delivery beside the live database; it adds `interrupted` (Ctrl+C
stopped the worker during a delivery), which this file never holds.

Messages are shortened with shorten() so one huge exception cannot make a
huge file; the same helper bounds the grader's reasons.
"""

import json
import os
import stat
import traceback

ENV = "NIGHTJAR_EVENTS"
MESSAGE_LIMIT = 200
SHORTENED = "… [shortened]"


def shorten(text, limit=MESSAGE_LIMIT, mark=SHORTENED):
    """text, or its start followed by `mark`, at most `limit` characters in all."""
    text = str(text)
    if len(text) <= limit:
        return text
    return text[:limit - len(mark)] + mark


# One more listener of the same events in the worker's process: the delivery
# history (nightjar/history.py), called as listener(event, fields).
listener = None


def enabled():
    """True when this run records events (NIGHTJAR_EVENTS is set)."""
    return bool(os.environ.get(ENV))


def wanted():
    """True when someone listens: the events file, or the delivery history."""
    return listener is not None or enabled()


def record(event, **fields):
    """Append one event to the file named by NIGHTJAR_EVENTS (nothing when unset); tell the listener."""
    if listener is not None:
        listener(event, fields)
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"event": event, **fields}, ensure_ascii=False) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def error_fields(error, stack=()):
    """type, bounded message and where (the last handler.py line involved) of an exception.

    stack: the frames above the one catching it (traceback.extract_stack()),
    when the error is caught below handle() and handler.py's line is up there.
    """
    where = ""
    frames = [frame for frame in [*stack, *traceback.extract_tb(error.__traceback__)]
              if os.path.basename(frame.filename) == "handler.py"]
    if frames:
        where = f"handler.py:{frames[-1].lineno}"
    elif isinstance(error, SyntaxError) and os.path.basename(error.filename or "") == "handler.py":
        where = f"handler.py:{error.lineno}"
    message = error.msg if isinstance(error, SyntaxError) else str(error)
    return {"type": type(error).__name__, "message": shorten(message), "where": where}


READ_LIMIT = 1 << 20  # bytes of an events file read; a run writes a few kilobytes

# The fields each kind must carry, and their types: an event without them, or
# with another type, is read as unreadable (the file may have been forged).
FIELDS = {
    "received": {"id": str, "name": str, "redelivered": bool, "tag": int},
    "returned": {"id": str}, "no-ack": {"id": str}, "transaction-open": {"id": str},
    "raised": {"id": str, "type": str, "message": str, "where": str},
    "load-failed": {"type": str, "message": str, "where": str},
    "ack": {"tag": int, "multiple": bool}, "double-ack": {"tag": int},
    "ack-elsewhere": {"tag": int},
    "nack": {"tag": int, "multiple": bool, "requeue": bool},
    "reject": {"tag": int, "requeue": bool},
    "paused": {"point": str}, "pause-not-reached": {"id": str, "point": str},
    "connection-lost": {"during": str, "type": str, "message": str, "where": str},
    "before-write": {"table": str}, "before-ack": {"tag": int}, "stop": {"effect": str},
}


def _well_formed(event):
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return False
    fields = FIELDS.get(event["event"], {})
    return all(type(event.get(name)) is kind for name, kind in fields.items())


def read(path):
    """The events of one run, in order; [] when the run wrote none.

    A line that is not a JSON object (a run killed mid-write) becomes an
    "unreadable" event holding its start, so nothing is skipped silently.
    Only a plain file is read (never through a link, never a pipe), and only
    its first READ_LIMIT bytes: the file is written by the run, and the run
    may be a stranger's code.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return []
    except OSError as error:
        return [{"event": "unreadable", "text": f"the events file could not be opened ({error.strerror})"}]
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return [{"event": "unreadable", "text": "the events file is not a plain file"}]
        text = file.read(READ_LIMIT).decode("utf-8", "replace")
    found = []
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not _well_formed(event):
            event = {"event": "unreadable", "text": shorten(line)}
        found.append(event)
    return found


SETTLING = ("ack", "nack", "reject")


class EventLog(list):
    """The events of one run (a list of dicts), with the questions the grader asks of them."""

    def first(self, kind):
        """The first event of that kind, or None."""
        return next((event for event in self if event["event"] == kind), None)

    def kinds(self):
        """The event kinds in order: ['received', 'before-write', ..., 'ack', ...]."""
        return [event["event"] for event in self]

    def received(self):
        """[(registration ID, redelivered)] in the order the worker took them."""
        return [(event["id"], event["redelivered"]) for event in self if event["event"] == "received"]

    def paused_at(self, point):
        """Did checkpoint() itself stop at POINT (not a handler printing the line)?"""
        return any(event["event"] == "paused" and event["point"] == point for event in self)

    def stopped_at(self, effect):
        return any(event["event"] == "stop" and event.get("effect") == effect for event in self)

    def settlement(self, registration_id):
        """The ack, nack or reject event that settled the registration's delivery, or None."""
        tags = [event["tag"] for event in self
                if event["event"] == "received" and event["id"] == registration_id]
        return next((event for event in self
                     if event["event"] in SETTLING and _settles(event, tags)), None)

    def stray_settlement(self):
        """The first ack, nack or reject of a delivery tag this run never received, or None."""
        tags = [event["tag"] for event in self if event["event"] == "received"]
        return next((event for event in self
                     if event["event"] in SETTLING and not _settles(event, tags)), None)


def _settles(event, tags):
    """Does this ack/nack/reject settle one of these delivery tags? (multiple: all up to its tag)"""
    tag = event.get("tag")
    if event.get("multiple"):
        return tag == 0 or any(t <= tag for t in tags)
    return tag in tags
