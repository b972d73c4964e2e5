"""The delivery history: every delivery the worker took, step by step, in a bounded file beside the live database.

The worker's session (nightjar/runtime/worker_runtime.py) installs a
Recorder (nightjar/runtime/history_recorder.py) as the listener of
nightjar/events.py, so the history hears the same events the grader's
event file does (received, paused, ack, nack, reject, returned, raised,
no-ack, connection-lost, ...) and adds two of its own: `interrupted` (Ctrl+C stopped the worker during the delivery)
and, on a record, `committed` (ticket numbers of the registration that
became visible since the previous record). `desk.py history` and the
site's registration page read it (nightjar/history_render.py).

The store is JSON Lines, one record a line, whole lines appended with a
single os.write() on a file opened with O_APPEND, so records of several
workers at once never interleave. A delivery's start and a pause are
written at once; its other steps with the next of those, or at the run's
end (one append a delivery in a --drain: each append makes the database's
next fsync a little dearer), so a worker killed outright loses at most the
steps since:

    {"id": "R-0003", "delivery": "9f2c41d07ab3", "event": "received", "time": 1733212345.125,
     "redelivered": false, "after": 0, "worker": 4242, "started": 918273}
    {"id": "R-0003", "delivery": "9f2c41d07ab3", "event": "paused", "time": ..., "point": "before-write"}
    {"id": "R-0003", "delivery": "9f2c41d07ab3", "event": "ack", "time": ..., "committed": [5]}

`after` is the highest ticket number the worker knew of when the delivery
began: the tickets of a delivery that never said how it ended are the
registration's tickets above it (and up to the next delivery's `after`). `worker` and `started` (its process ID
and start time) tell whether the worker holding a delivery still runs. A
line that is not such a record (a power cut mid-write, an edited file) is
skipped and counted, never fatal.

Bounded: the last PER_REGISTRATION deliveries of each registration and the
last OVERALL deliveries in all are kept. When the file grows past
COMPACT_BYTES, a worker rewrites it keeping only those, plus one `trimmed`
record per registration that lost some: {"id", "event": "trimmed",
"deliveries": N, "since": time of its first delivery}. It does so under an
exclusive flock, once no other worker has the file open (writers hold a
shared one). Readers apply the same bounds.

A delivery's last record says how it ended (returned, raised, interrupted,
connection-lost), except after a plain ack: a settlement with nothing
after it ends the story, and no `returned` record is written for it.

The history is a teaching aid, not a promise to a guest: it is never
fsynced, and nothing about it can fail or slow a delivery. Its writer
never touches the handler's database connection; it reads committed
tickets through a read-only connection of its own.
"""

import fcntl
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .events import SETTLING


ENV = "NIGHTJAR_HISTORY"   # a path for the store, or "off"; default: beside the database
PER_REGISTRATION = 20      # deliveries kept per registration (RabbitMQ's delivery limit is 20)
OVERALL = 1000             # deliveries kept in all
COMPACT_BYTES = 1 << 20    # rewrite the file once it grows past this

# How a delivery ends, as far as the worker can say; how RabbitMQ is told it is done with.
ENDINGS = {"returned", "raised", "interrupted", "connection-lost"}


def store_path(db_path, environ=None):
    """The history file of the database at db_path (NIGHTJAR_HISTORY may name another, or "off"); None when off."""
    env = os.environ if environ is None else environ
    chosen = (env.get(ENV) or "").strip()
    if chosen.lower() == "off" or str(db_path) == ":memory:":
        return None
    if chosen:
        return Path(chosen)
    db = Path(db_path)
    return db.with_name(db.stem + ".history.jsonl")


def clear(path):
    """Remove the history file; how many deliveries it held (0 when there was none)."""
    if path is None:
        return 0
    try:
        held = sum(len(kept) for kept in read(path).deliveries.values())
    except OSError:
        held = 0
    remove(path)
    return held


def remove(path):
    """Remove the history file, if any, without reading it (a new database's worker needs no count)."""
    if path is None:
        return
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---------------------------------------------------------------- writing

# One encoder for every record: json.dumps() with options builds a new one each call, which
# costs as much as encoding a record.
encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def encode(record):
    """One record as one line of the store."""
    return (encoder.encode(record) + "\n").encode("utf-8", "replace")


class Appender:
    """Appends whole lines (bytes) to the store, each with one write.

    It holds a shared flock on the file while it has the file open, so a
    compaction (which needs the exclusive lock) never runs under a writer:
    one write() a record, no more.
    """

    CHECK_SIZE_EVERY = 64  # writes between looks at the file's real size (other writers add to it)

    def __init__(self, path):
        self.path = path
        self._fd = None
        self._size = 0
        self._writes = 0

    def write(self, data):
        """Append `data`; the file's size afterwards (about: other writers' lines are seen now and then)."""
        if self._fd is None:
            self._open()
            if self._size and os.pread(self._fd, 1, self._size - 1) != b"\n":
                data = b"\n" + data  # the last line was cut short: start on a line of our own
        os.write(self._fd, data)
        self._writes += 1
        self._size += len(data)
        if self._writes % self.CHECK_SIZE_EVERY == 0:
            self._size = os.fstat(self._fd).st_size
        return self._size

    def _open(self):
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a compaction runs
            found = os.fstat(fd)
            if found.st_nlink:
                self._fd, self._size = fd, found.st_size
                return
            os.close(fd)  # compacted (replaced) while we waited: open the new file

    def close(self):
        if self._fd is not None:
            os.close(self._fd)  # releases the lock
            self._fd = None


def append(path, data):
    """Append whole lines (bytes) to the store at path; the file's size afterwards."""
    appender = Appender(path)
    try:
        return appender.write(data)
    finally:
        appender.close()


def compact(path, appender=None):
    """Rewrite the file keeping only what the bounds keep; False when a writer has it open (try later).

    appender: the caller's own Appender, closed first (its shared lock would keep the exclusive one away).
    """
    if appender is not None:
        appender.close()
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another worker is writing to it now
        if os.fstat(fd).st_nlink == 0:
            return True  # another worker compacted it first
        with open(fd, "rb", closefd=False) as handle:
            kept = parse(handle.read().decode("utf-8", "replace"))
        kept.bound(PER_REGISTRATION, OVERALL)
        lines = [encode(record) for record in kept.records()]
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(3).hex()}")
        try:
            with open(temporary, "wb") as out:
                out.write(b"".join(lines))
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)  # e.g. a full disk: the old file stays as it was
            raise
        return True
    finally:
        os.close(fd)


def process_start(pid):
    """When the process started (clock ticks since boot, from /proc), or None where /proc has no answer."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else int(fields[19])  # a zombie has ended


def held_now(stored):
    """The deliveries a worker holds right now, unacknowledged: [(Delivery, paused point or None)].

    A delivery is held from `received` until it is settled or its worker
    ends; a worker that ended without a word (killed) is found gone on this
    machine by its process ID and start time. Exact for the lab's own
    workers, which all record here; RabbitMQ's own statistics lag seconds.
    """
    found = []
    for kept in stored.deliveries.values():
        for delivery in kept:
            if delivery.ended or any(step["event"] in SETTLING for step in delivery.steps):
                continue
            if delivery.worker is None or process_start(delivery.worker) != delivery.started:
                continue
            paused = [step.get("point") for step in delivery.steps if step["event"] == "paused"]
            found.append((delivery, paused[-1] if paused else None))
    return sorted(found, key=lambda held: held[0].time)


# ---------------------------------------------------------------- reading

@dataclass
class Delivery:
    """One delivery of a registration: its received record and the records after it, in order."""

    id: str
    token: str
    time: float
    redelivered: bool
    after: int
    steps: list = field(default_factory=list)   # the records after `received`
    worker: int = None     # the worker's process ID and start time (process_start)
    started: int = None

    @property
    def ended(self):
        """Did the worker say how it ended (a settlement as the last step says so too)?"""
        return any(step["event"] in ENDINGS for step in self.steps) or bool(
            self.steps and self.steps[-1]["event"] in SETTLING)


@dataclass
class Trimmed:
    deliveries: int   # how many earlier deliveries are not kept
    since: float      # when the registration's first delivery was


@dataclass
class History:
    """What the store holds, by registration: deliveries in time order, what was trimmed, damaged lines."""

    deliveries: dict = field(default_factory=dict)   # registration ID -> [Delivery]
    trimmed: dict = field(default_factory=dict)      # registration ID -> Trimmed
    damaged: int = 0

    def of(self, registration_id):
        return self.deliveries.get(registration_id, [])

    def bound(self, per_registration=PER_REGISTRATION, overall=OVERALL):
        """Keep the last `per_registration` deliveries of each registration, the last `overall` in all."""
        for registration_id, kept in list(self.deliveries.items()):
            if len(kept) > per_registration:
                self._trim(registration_id, kept[:-per_registration])
                self.deliveries[registration_id] = kept[-per_registration:]
        everything = sorted((d for kept in self.deliveries.values() for d in kept),
                            key=lambda d: d.time)
        if overall is not None and len(everything) > overall:
            for old in everything[:-overall]:
                self._trim(old.id, [old])
                self.deliveries[old.id].remove(old)
            for registration_id in [r for r, kept in self.deliveries.items() if not kept]:
                del self.deliveries[registration_id]
                self.trimmed.pop(registration_id, None)

    def _trim(self, registration_id, dropped):
        before = self.trimmed.get(registration_id)
        first = min([d.time for d in dropped] + ([before.since] if before else []))
        self.trimmed[registration_id] = Trimmed((before.deliveries if before else 0) + len(dropped),
                                                first)

    def records(self):
        """The records that would store this History again (trimmed notes first)."""
        found = [{"id": rid, "event": "trimmed", "deliveries": t.deliveries, "since": t.since}
                 for rid, t in self.trimmed.items()]
        for delivery in sorted((d for kept in self.deliveries.values() for d in kept),
                               key=lambda d: d.time):
            found.append({"id": delivery.id, "delivery": delivery.token, "event": "received",
                          "time": delivery.time, "redelivered": delivery.redelivered,
                          "after": delivery.after, "worker": delivery.worker,
                          "started": delivery.started})
            found.extend(delivery.steps)
        return found


def parse(text, registration_id=None):
    """A History from the store's text; only one registration's records when registration_id is given."""
    history = History()
    by_token = {}
    wanted = f'"id":"{registration_id}"' if registration_id else None
    for line in text.split("\n"):
        if not line.strip():
            continue
        # Other registrations' records are not even decoded (a page shows one registration).
        if wanted and wanted not in line and line.startswith('{"id":"'):
            continue
        try:
            record = json.loads(line)
            registration = record["id"]
            kind = record["event"]
            if not isinstance(registration, str) or not isinstance(kind, str):
                raise ValueError
            if registration_id and registration != registration_id:
                continue
            if kind == "trimmed":
                history.trimmed[registration] = Trimmed(int(record["deliveries"]),
                                                        float(record["since"]))
            elif kind == "received":
                delivery = Delivery(registration, str(record["delivery"]), float(record["time"]),
                                    bool(record["redelivered"]), int(record.get("after") or 0),
                                    worker=record.get("worker"), started=record.get("started"))
                by_token[delivery.token] = delivery
                history.deliveries.setdefault(registration, []).append(delivery)
            else:
                float(record["time"])
                owner = by_token.get(record["delivery"])
                if owner is not None:  # its `received` record was lost: nothing to attach it to
                    owner.steps.append(record)
        except (ValueError, KeyError, TypeError, AttributeError):
            history.damaged += 1
    for kept in history.deliveries.values():
        kept.sort(key=lambda d: d.time)
    return history


def read(path, registration_id=None):
    """The History in the file (bounded as the store keeps it); an empty one when there is no file.

    OSError (e.g. PermissionError) when the file exists but cannot be read.
    """
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return History()
    history = parse(text, registration_id)
    history.bound(PER_REGISTRATION, None if registration_id else OVERALL)
    return history
