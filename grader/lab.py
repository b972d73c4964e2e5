"""A throwaway lab for one check: its own queue, its own SQLite file, real worker processes."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pika.exceptions

from nightjar import broker, db as database, events as worker_events, queueing
from nightjar.config import Settings

ROOT = Path(__file__).resolve().parents[1]
TICKET_DESK = ROOT / "ticket-desk"

# How long a message may take to be back in the queue after the worker holding
# it died (RabbitMQ needs about 0.05 s; this allows for a loaded machine).
RETURN_WAIT = 5.0
# When the worker had already acknowledged the delivery, it is not expected back.
LOST_WAIT = 1.0
# After a normal run: how long to watch that nothing comes back to the queue.
SETTLE = 0.3
# The same when the run recorded the ack of that very delivery: the worker's
# clean close reached RabbitMQ after the ack, so only a slip is watched for.
SETTLE_ACKED = 0.1
# The end of a worker's stderr kept for a reason's detail (a handler may print megabytes).
STDERR_TAIL = 4096


class Workstation:
    """A private copy of the Workstation folder: the repo's worker.py and common.py, the learner's handler.py."""

    def __init__(self, folder, handler_path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True)
        for name in ("worker.py", "common.py"):
            shutil.copyfile(TICKET_DESK / name, self.folder / name)
        shutil.copyfile(handler_path, self.folder / "handler.py")


class Processes:
    """Every worker process still running, so Ctrl+C or a failure can stop them all."""

    _lock = threading.Lock()
    _running = set()

    @classmethod
    def add(cls, process):
        with cls._lock:
            cls._running.add(process)

    @classmethod
    def remove(cls, process):
        with cls._lock:
            cls._running.discard(process)

    @classmethod
    def kill_all(cls):
        with cls._lock:
            running = list(cls._running)
        for process in running:
            _kill_group(process)


def _kill_group(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


SETTLING = ("ack", "nack", "reject")


@dataclass
class Run:
    """One finished worker process: its exit status and its events (nightjar/events.py)."""

    returncode: int | None
    stdout: list
    stderr: str  # only its end (STDERR_TAIL), for a reason's detail
    events: list
    timed_out: bool = False
    paused: bool = False
    timeout: float = 0.0

    def first(self, kind):
        """The first event of that kind, or None."""
        return next((event for event in self.events if event["event"] == kind), None)

    def received(self):
        """[(registration ID, redelivered)] in the order the worker took them."""
        return [(event["id"], event["redelivered"])
                for event in self.events if event["event"] == "received"]

    def stopped_at(self, effect):
        return any(event["event"] == "stop" and event.get("effect") == effect
                   for event in self.events)

    def kinds(self):
        """The event kinds in order: ['received', 'before-write', ..., 'ack', ...]."""
        return [event["event"] for event in self.events]

    def settlement(self, registration_id):
        """The ack, nack or reject event that settled the registration's delivery, or None."""
        tags = [event["tag"] for event in self.events
                if event["event"] == "received" and event["id"] == registration_id]
        for event in self.events:
            if event["event"] in SETTLING and _settles(event, tags):
                return event
        return None

    def stray_settlement(self):
        """The first ack, nack or reject of a delivery tag this run never received, or None."""
        tags = [event["tag"] for event in self.events if event["event"] == "received"]
        return next((event for event in self.events
                     if event["event"] in SETTLING and not _settles(event, tags)), None)


def _settles(event, tags):
    """Does this ack/nack/reject settle one of these delivery tags? (multiple: all up to its tag)"""
    tag = event.get("tag")
    if event.get("multiple"):
        return tag == 0 or any(t <= tag for t in tags)
    return tag in tags


@dataclass
class Lab:
    """One check's (or one variant's) own queue and database on the grading broker."""

    root: Path
    workstation: Workstation
    amqp_url: str
    label: str
    run_timeout: float = 10.0
    queue_prefix: str = "nightjar.grader"
    # On a shared grading broker the lab's queues are deleted afterwards; a
    # private node is thrown away whole.
    delete_queues: bool = False
    _connection: object = field(default=None, repr=False)
    _runs: int = 0

    def __post_init__(self):
        self.dir = Path(self.root) / self.label
        self.dir.mkdir(parents=True)
        self.db_path = str(self.dir / "nightjar.db")
        # Names no live lab uses: the live queue is never touched.
        self.queue = f"{self.queue_prefix}.{uuid.uuid4().hex[:10]}.{self.label}"
        self.settings = Settings(amqp_url=self.amqp_url, db_path=self.db_path, queue=self.queue)
        database.connect(self.db_path).close()

    # ---- the database ------------------------------------------------------

    def _read(self, sql, params=()):
        db = sqlite3.connect(self.db_path, timeout=30)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def tickets(self, registration_id):
        """[(number, name)] of the registration's tickets."""
        return self._read("SELECT number, name FROM tickets WHERE registration_id = ? ORDER BY number",
                          (registration_id,))

    def completed(self, registration_id):
        return bool(self._read("SELECT 1 FROM completed WHERE id = ?", (registration_id,)))

    def completed_keys(self):
        """Every key in the completed table, as text."""
        return [str(key) for (key,) in self._read("SELECT id FROM completed ORDER BY rowid")]

    def hold_write_lock(self):
        """A connection holding SQLite's write lock (BEGIN IMMEDIATE); rollback() releases it."""
        holder = sqlite3.connect(self.db_path, isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")
        return holder

    # ---- the queue -----------------------------------------------------------

    def register(self, name):
        """Save and queue a registration through the site's code path; returns its ID."""
        registration_id, queued = queueing.register_at(self.db_path, self.settings, name)
        if not queued:
            raise RuntimeError(f"the grading broker did not take the job for {registration_id}")
        return registration_id

    def deliver_again(self, registration_id, name):
        """A new delivery of an existing registration, as `desk.py retry` does."""
        db = database.connect(self.db_path)
        try:
            with queueing.publisher(self.settings) as channel:
                queueing.queue_registration(db, channel, self.settings, registration_id, name)
        finally:
            db.close()

    def _channel(self):
        if self._connection is None or not self._connection.is_open:
            self._connection = broker.connect(self.settings)
        return self._connection.channel()

    def ready(self):
        """Messages ready in this lab's queue (passive declare: nothing is consumed)."""
        channel = self._channel()
        try:
            return broker.ready_count(channel, self.queue)
        finally:
            if channel.is_open:
                channel.close()

    def dead_lettered(self):
        """Messages in this lab's dead-letter queue."""
        channel = self._channel()
        try:
            return broker.ready_count(channel, self.settings.dead_letter_queue)
        finally:
            if channel.is_open:
                channel.close()

    def wait_until_back(self, expected=True):
        """True once the message is ready again (after the worker holding it stopped)."""
        deadline = time.monotonic() + (RETURN_WAIT if expected else LOST_WAIT)
        while True:
            if self.ready() > 0:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.03)

    def settled_empty(self, acked=False):
        """True when nothing is (or comes back) in the queue shortly after a run."""
        deadline = time.monotonic() + (SETTLE_ACKED if acked else SETTLE)
        while True:
            if self.ready() > 0:
                return False
            if time.monotonic() > deadline:
                return True
            time.sleep(0.05)

    def close(self):
        try:
            if self.delete_queues:
                channel = self._channel()
                channel.queue_delete(self.queue)
                channel.queue_delete(self.settings.dead_letter_queue)
            if self._connection is not None and self._connection.is_open:
                self._connection.close()
        except (pika.exceptions.AMQPError, broker.BrokerUnavailable, OSError):
            pass

    # ---- worker processes ------------------------------------------------------

    def env(self, events_path):
        env = {k: v for k, v in os.environ.items() if not k.startswith("NIGHTJAR_")}
        env.update(
            NIGHTJAR_AMQP_URL=self.amqp_url, NIGHTJAR_DB=self.db_path, NIGHTJAR_QUEUE=self.queue,
            NIGHTJAR_EVENTS=str(events_path),
            PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1",
            PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        )
        return env

    def run(self, *args, interrupt_at=None, stop=None, db_timeout=None, on_pause=None):
        """Run the worker once to its end.

        interrupt_at=POINT: start it with --pause POINT and press Ctrl+C (SIGINT)
        when it prints `Paused POINT.`; on_pause() is called just before.
        stop=EFFECT: the worker kills itself at that real effect (see effects.py).
        The process is killed if it has not finished within run_timeout.
        """
        self._runs += 1
        events_path = self.dir / f"events-{self._runs}.jsonl"
        command = [sys.executable, "-m", "nightjar.harness.effects", "--parent", str(os.getpid())]
        if stop:
            command += ["--stop", stop]
        if db_timeout is not None:
            command += ["--db-timeout", str(db_timeout)]
        command += ["--", str(self.workstation.folder / "worker.py"), *args]
        if interrupt_at:
            command += ["--pause", interrupt_at]

        process = subprocess.Popen(
            command, cwd=self.workstation.folder, env=self.env(events_path), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        Processes.add(process)
        stdout, stderr = [], []
        paused = threading.Event()
        pause_line = f"Paused {interrupt_at}." if interrupt_at else None

        def read_stdout():
            for line in process.stdout:
                stdout.append(line.rstrip("\n"))
                if line.rstrip("\n") == pause_line:
                    paused.set()

        def read_stderr():
            tail = ""
            for chunk in iter(lambda: process.stderr.read(65536), ""):
                tail = (tail + chunk)[-STDERR_TAIL:]
            stderr.append(tail)

        readers = [threading.Thread(target=read_stdout, daemon=True),
                   threading.Thread(target=read_stderr, daemon=True)]
        for reader in readers:
            reader.start()

        deadline = time.monotonic() + self.run_timeout
        timed_out = False
        try:
            if interrupt_at:
                while not paused.is_set() and process.poll() is None and time.monotonic() < deadline:
                    paused.wait(0.02)
                if paused.is_set():
                    if on_pause:
                        on_pause()
                    process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(process)
                process.wait()
        finally:
            if process.poll() is None:
                _kill_group(process)
                process.wait()
            Processes.remove(process)
            _kill_group(process)  # anything handler.py started goes with its worker
            for reader in readers:
                reader.join(timeout=2)
            process.stdin.close()
        return Run(returncode=process.returncode, stdout=stdout, stderr="".join(stderr),
                   events=worker_events.read(events_path), timed_out=timed_out, paused=paused.is_set(),
                   timeout=self.run_timeout)
