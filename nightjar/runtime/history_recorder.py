"""The worker's side of the delivery history (nightjar/history.py): a Recorder that hears the worker's events and appends each step.

One Recorder a worker run; worker_runtime.session() starts and closes it.
Nothing it does can fail or change a delivery: every error is swallowed
and said once on stderr. It never writes to the database, and reads the
committed tickets either between the handler's transactions (a plain
cursor on the handler's connection) or through a read-only connection of
its own while one is open, so the handler's transaction never sees it.
"""

import os
import sqlite3
import sys
import time
from pathlib import Path

from .. import events
from ..events import SETTLING
from ..history import COMPACT_BYTES, ENDINGS, Appender, compact, encoder, process_start, store_path

# The events of a delivery the history keeps, with the fields it keeps of each.
KEPT = {
    "paused": ("point",), "ack": (), "nack": ("requeue",), "reject": ("requeue",),
    "double-ack": (), "returned": (), "raised": ("type", "message", "where"),
    "no-ack": (), "transaction-open": (), "pause-not-reached": ("point",),
    "connection-lost": ("during", "type"), "interrupted": (),
}
# Written at once: a delivery's start and a pause, after which a worker may wait long (or be
# killed). The other steps join the next such write, or the run's end: in a --drain that is
# one append a delivery. A worker killed outright in between loses those last steps only.
AT_ONCE = {"received", "paused"}
# Events after which tickets may have been committed: the history looks before recording them.
LOOK_FOR_TICKETS = {"paused", "ack", "nack", "reject", "returned", "raised", "interrupted",
                    "connection-lost"}


class Delivery:
    """The delivery being handled: what its records share, and what the looks for tickets found."""

    __slots__ = ("id", "start", "after", "reported", "seen", "last", "ended")

    def __init__(self, registration_id, after):
        self.id = registration_id
        # Every record of it starts alike: {"id":"R-0003","delivery":"9f2c41d07ab3", (encoded once)
        self.start = f'{{"id":{encoder.encode(registration_id)},"delivery":"{os.urandom(6).hex()}",'
        self.after = after        # the highest ticket number known when it began
        self.reported = set()     # its tickets already recorded as committed
        self.seen = None          # the handler connection's total_changes at the last look
        self.last = "received"    # the last event recorded
        self.ended = False        # an ending (ENDINGS) was recorded


class Recorder:
    """Writes the history of one worker run: listens to nightjar/events.py, one record per event."""

    def __init__(self, path, db_path, db=None):
        self.path = Path(path)
        self.db_path = db_path
        # The handler's connection: its total_changes (a counter) says whether a ticket can be new
        # since the last look, and between its transactions the look reads through it.
        self.db = db
        self.current = None  # the delivery being handled: its record fields and what it reported
        self._store = Appender(self.path)
        self._waiting = []  # lines (str) not written yet (see AT_ONCE)
        self._next_compaction = COMPACT_BYTES
        self._highest = None  # the highest ticket number this run knows of
        self._tickets_db = None
        self._warned = False
        # The end of every `received` line: this process and its start time.
        self._worker = encoder.encode({"worker": os.getpid(), "started": process_start(os.getpid())})[1:-1]

    @classmethod
    def start(cls, settings, db=None):
        """A Recorder for this run, listening to the worker's events; None when the history is off."""
        path = store_path(settings.db_path)
        if path is None:
            return None
        recorder = cls(path, settings.db_path, db)
        events.listener = recorder.hear
        return recorder

    def hear(self, event, fields):
        """An event of the worker (events.record calls this); never raises."""
        try:
            if event == "received":
                self._begin(fields)
            elif self.current is not None and event in KEPT:
                self._step(event, {k: fields[k] for k in KEPT[event] if k in fields})
        except Exception as error:  # noqa: BLE001  (nothing may fail a delivery)
            self._warn(error)

    def stopped(self, event="interrupted", **fields):
        """The run stops (Ctrl+C: interrupted; RabbitMQ gone: connection-lost) during a delivery."""
        if self.current is not None and not self.current.ended:
            self.hear(event, fields)

    def close(self):
        """The run's end: write what is still waiting, let go of the file."""
        if events.listener == self.hear:
            events.listener = None
        try:
            self._flush()
        except Exception as error:  # noqa: BLE001  (nothing may fail the worker)
            self._warn(error)
        self._store.close()
        if self._tickets_db is not None:
            self._tickets_db.close()
            self._tickets_db = None

    def _begin(self, fields):
        if self._highest is None:  # once a run; then what this worker's looks have seen
            self._highest = max(self._tickets(None, 0), default=0)
        self.current = Delivery(fields["id"], self._highest)
        # Built by hand, the commonest record: a bool and an int, then the worker's own part.
        redelivered = "true" if fields["redelivered"] else "false"
        self._write("received", f',"redelivered":{redelivered},"after":{self._highest},{self._worker}')

    def _step(self, event, fields):
        current = self.current
        if event in ENDINGS:
            if current.ended:
                return  # e.g. Ctrl+C after handle() returned: that delivery's story is told
            current.ended = True
        new = self._new_tickets() if event in LOOK_FOR_TICKETS else []
        if event == "returned" and current.last in SETTLING and not fields and not new:
            return  # a plain ack (or nack, reject) then return: the settlement ends the story
        current.last = event
        members = "," + encoder.encode(fields)[1:-1] if fields else ""
        if new:  # ticket numbers (ints), as JSON: "committed":[5,6]
            members += f',"committed":[{",".join(map(str, new))}]'
        self._write(event, members)

    def _new_tickets(self):
        """Tickets of the current registration committed since the last look (none when nothing changed)."""
        current = self.current
        changes = self.db.total_changes if self.db is not None else None
        if changes is not None and changes == current.seen:
            return []
        new = [n for n in self._tickets(current.id, current.after) if n not in current.reported]
        current.reported.update(new)
        self._highest = max([self._highest, *new])
        # Changes in a transaction still open are not committed yet: look again next time.
        current.seen = None if changes is None or self.db.in_transaction else changes
        return new

    def _write(self, event, fields):
        """Record `event`; fields: its own fields as JSON members, each after a comma ("" for none).

        The line is the same as history.encode() of the record {"id", "delivery", "event",
        "time", **fields} would give, put together from parts encoded once where possible
        (encoding whole records cost more than all the rest of the history's work a delivery).
        """
        line = f'{self.current.start}"event":"{event}","time":{round(time.time(), 3)!r}{fields}}}\n'
        self._waiting.append(line)
        if event in AT_ONCE:
            self._flush()

    def _flush(self):
        if not self._waiting:
            return
        data = "".join(self._waiting).encode("utf-8", "replace")
        self._waiting.clear()
        size = self._store.write(data)
        if size > self._next_compaction:
            # Not while another worker has the file open: then again once it has grown some more.
            compacted = compact(self.path, self._store)
            self._next_compaction = COMPACT_BYTES if compacted else size + COMPACT_BYTES // 4

    def _tickets(self, registration_id, above):
        """Committed ticket numbers of the registration above `above` (registration_id None: the
        highest of all); [] (said once) when the database cannot be read now: the step is recorded anyway.

        Between the handler's transactions, through its connection (a plain cursor, so no
        watcher of its statements sees it), which is cheapest; while one is open (a pause inside
        it), through a read-only connection of the history's own, which sees only what is
        committed and leaves the handler's transaction alone.
        """
        try:
            if self.db is not None and not self.db.in_transaction:
                cursor = sqlite3.Cursor(self.db)
            else:
                if self._tickets_db is None:
                    uri = Path(self.db_path).resolve().as_uri() + "?mode=ro"
                    # factory: a plain connection even where sqlite3.connect is watched (the grader's effects).
                    self._tickets_db = sqlite3.connect(uri, uri=True, timeout=1,
                                                       factory=sqlite3.Connection)
                cursor = self._tickets_db.cursor()
            if registration_id is None:  # the highest of all
                rows = cursor.execute("SELECT max(number) FROM tickets WHERE number > ?", (above,))
            else:
                rows = cursor.execute("SELECT number FROM tickets WHERE registration_id = ?"
                                      " AND number > ? ORDER BY number", (registration_id, above))
            return [number for (number,) in rows if number is not None]
        except sqlite3.Error as error:
            self._warn(error)
            return []

    def _warn(self, error):
        """One line on stderr, the first time only: the worker goes on either way."""
        if self._warned:
            return
        self._warned = True
        if isinstance(error, sqlite3.Error):
            what = f"could not read the tickets in {self.db_path}"
            after = "deliveries go on as before, recorded without their tickets"
        else:
            what, after = f"could not be written to {self.path}", "deliveries go on as before, unrecorded"
        print(f"The delivery history {what} ({type(error).__name__}: {error}); {after}.",
              file=sys.stderr, flush=True)
