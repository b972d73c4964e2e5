"""Run the Workstation's worker.py, watching (and optionally stopping at) its real effects.

    NIGHTJAR_EVENTS=FILE python -m nightjar.harness.effects [--parent PID] [--stop EFFECT] [--db-timeout S] -- worker.py [ARGS]

Started by the grader with the Workstation folder as its working directory.
The worker, common.py and the learner's handler.py run exactly as with
`python3 worker.py`; this module only watches what reaches SQLite and
RabbitMQ while handle() runs:

- every sqlite3 connection of the process is opened with a Connection
  subclass (the `factory=` argument of sqlite3.connect) that notices the
  first statement that writes, the COMMIT of a transaction that changed the
  tickets table, and the moment such a commit has finished;
- pika's BlockingChannel.basic_ack is wrapped, so the moment before an ack
  is sent to RabbitMQ is seen however handle() reached it.

Each effect is appended to the worker's own events file (NIGHTJAR_EVENTS,
format in nightjar/events.py). With --stop EFFECT the process records a
`stop` event and kills itself with SIGKILL the first time it reaches that
effect: a real crash at that exact point, whatever checkpoint() calls
handler.py has (or lacks).

Effects: before-write, before-commit, after-commit, before-ack.
With --parent, the process dies with the grader should the grader be killed.
"""

import argparse
import os
import re
import runpy
import signal
import sqlite3
import sys

from nightjar import events

EFFECTS = ("before-write", "before-commit", "after-commit", "before-ack")

# Leading comments, then the statement's first keyword.
_LEADING = r"\A(?:\s|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*"
_WRITE = re.compile(_LEADING + r"(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE | re.DOTALL)
_COMMIT = re.compile(_LEADING + r"(COMMIT|END)\b", re.IGNORECASE | re.DOTALL)
_TABLE = re.compile(r"\b(?:INTO|UPDATE(?:\s+OR\s+\w+)?|FROM)\s+[\"'`\[]?(\w+)", re.IGNORECASE)


class Recorder:
    """Records effects as events; stops the process at the requested effect."""

    def __init__(self, stop=None):
        self.stop = stop
        self.armed = False
        self.committed = None  # tickets (count, highest number) as last seen committed
        self.acked_on = []  # channels handle() acknowledged on since the last stop check
        self.delivering = None  # the channel that delivered the job handle() has now

    def reach(self, effect, **fields):
        events.record(effect, **fields)
        if effect == self.stop:
            events.record("stop", effect=effect)
            self.settle_sent_acks()
            os.write(2, f"Stopped by the grader: {effect}.\n".encode())
            os.kill(os.getpid(), signal.SIGKILL)


    def settle_sent_acks(self):
        """Wait until RabbitMQ has taken every ack sent before this stop.

        An ack written to the socket just before a crash may or may not be
        counted; a synchronous call on the same channel returns only after
        RabbitMQ has handled what came before it, so the stop's outcome is
        the same on every run.
        """
        for channel in self.acked_on:
            try:
                channel.exchange_declare("amq.direct", passive=True)
            except Exception:  # a closed channel: its acks were settled or lost already
                pass


RECORDER = None


def _tickets(connection):
    """(count, highest number) of tickets as this connection sees them, or None."""
    try:
        return sqlite3.Connection.execute(
            connection, "SELECT count(*), coalesce(max(rowid), 0) FROM tickets").fetchone()
    except sqlite3.Error:
        return None


def _before(connection, sql):
    if not (RECORDER and RECORDER.armed) or not isinstance(sql, str):
        return
    if _WRITE.match(sql):
        table = _TABLE.search(sql)
        RECORDER.reach("before-write", table=table.group(1) if table else "")
    elif _COMMIT.match(sql):
        _before_commit(connection)


def _before_commit(connection):
    if RECORDER and RECORDER.armed and connection.in_transaction:
        if _tickets(connection) != RECORDER.committed:
            RECORDER.reach("before-commit")


def _after(connection):
    """After a statement or commit: did a transaction that changed the tickets just commit?"""
    if not (RECORDER and RECORDER.armed) or connection.in_transaction:
        return
    state = _tickets(connection)
    if state is not None and state != RECORDER.committed:
        RECORDER.committed = state
        RECORDER.reach("after-commit")


class WatchedCursor(sqlite3.Cursor):
    def execute(self, sql, parameters=(), /):
        _before(self.connection, sql)
        try:
            return super().execute(sql, parameters)
        finally:
            _after(self.connection)

    def executemany(self, sql, seq_of_parameters, /):
        _before(self.connection, sql)
        try:
            return super().executemany(sql, seq_of_parameters)
        finally:
            _after(self.connection)

    def executescript(self, sql_script, /):
        _before(self.connection, sql_script)
        try:
            return super().executescript(sql_script)
        finally:
            _after(self.connection)


class WatchedConnection(sqlite3.Connection):
    """sqlite3.Connection whose commits are watched; behaves exactly like the original."""

    def cursor(self, factory=WatchedCursor):
        return super().cursor(factory)

    # The C implementations of these shortcuts would bypass cursor(); route
    # them through it, as the documentation describes them.
    def execute(self, sql, parameters=(), /):
        return self.cursor().execute(sql, parameters)

    def executemany(self, sql, parameters, /):
        return self.cursor().executemany(sql, parameters)

    def executescript(self, sql_script, /):
        return self.cursor().executescript(sql_script)

    def commit(self):
        _before_commit(self)
        try:
            return super().commit()
        finally:
            _after(self)

    def __exit__(self, exc_type, exc_value, traceback):
        if exc_type is None:
            _before_commit(self)
        try:
            return super().__exit__(exc_type, exc_value, traceback)
        finally:
            _after(self)


def install(recorder, db_timeout=None):
    """Hook sqlite3.connect, pika's basic_ack and the worker's TrackedChannel."""
    global RECORDER
    RECORDER = recorder
    connections = []
    original_connect = sqlite3.connect

    def connect(*args, **kwargs):
        kwargs.setdefault("factory", WatchedConnection)
        if db_timeout is not None:
            kwargs["timeout"] = db_timeout
        connection = original_connect(*args, **kwargs)
        connections.append(connection)
        return connection

    sqlite3.connect = connect

    from pika.adapters.blocking_connection import BlockingChannel

    original_ack = BlockingChannel.basic_ack

    def basic_ack(self, delivery_tag=0, multiple=False):
        if recorder.armed:
            recorder.reach("before-ack", tag=delivery_tag)
            if recorder.delivering is not None and self is not recorder.delivering:
                # A delivery tag means something only on the channel that delivered it.
                events.record("ack-elsewhere", tag=delivery_tag)
        result = original_ack(self, delivery_tag, multiple)
        if self not in recorder.acked_on:
            recorder.acked_on.append(self)
        return result

    BlockingChannel.basic_ack = basic_ack

    from nightjar.runtime import worker_runtime

    class ArmingChannel(worker_runtime.TrackedChannel):
        """The worker builds this channel right before calling handle(): start watching."""

        def __init__(self, channel):
            super().__init__(channel)
            db = connections[0] if connections else None
            recorder.committed = _tickets(db) if db is not None else None
            recorder.delivering = _unwrapped(channel)
            recorder.armed = True

    worker_runtime.TrackedChannel = ArmingChannel


def _unwrapped(channel):
    """The pika channel under the worker's wrappers (each keeps the one below as _channel)."""
    while "_channel" in vars(channel):
        channel = vars(channel)["_channel"]
    return channel


def die_with_parent(parent):
    """Linux: be killed if the grader dies without stopping this worker (e.g. SIGKILL)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before prctl took effect
        os._exit(1)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m nightjar.harness.effects")
    parser.add_argument("--parent", type=int)
    parser.add_argument("--stop", choices=EFFECTS)
    parser.add_argument("--db-timeout", type=float)
    parser.add_argument("worker")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    options = parser.parse_args(argv)

    if options.parent:
        die_with_parent(options.parent)
    if not os.environ.get(events.ENV):
        parser.error(f"{events.ENV} must name the events file")
    install(Recorder(options.stop), options.db_timeout)
    folder = os.path.dirname(os.path.abspath(options.worker))
    if sys.path[0] != folder:
        sys.path.insert(0, folder)  # handler.py and common.py, as for `python3 worker.py`
    sys.argv = [options.worker, *options.args]
    runpy.run_path(options.worker, run_name="__main__")


if __name__ == "__main__":
    main()
