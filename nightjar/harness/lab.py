"""A throwaway lab: its own queue names and database on a given broker, a Workstation folder, and the programs run in it.

The grader (one lab per check), the unit checks (a trial of the learner's
handler.py) and the tests all use this Lab. Nothing here touches the live
database or the live queue; cleanup() stops the lab's programs, deletes its
queues and, when the lab made its own folder, removes that too.
"""

import compileall
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pika
import pika.exceptions

from .. import broker, db as database, queueing, registrations
from ..config import REPO_ROOT, Settings
from . import processes, reading

TICKET_DESK = REPO_ROOT / "ticket-desk"
# What a Workstation folder holds: the lab's programs and the learner's handler.py.
WORKSTATION_PROGRAMS = ("worker.py", "desk.py", "common.py")

# How long an unacknowledged delivery may take to be ready again after the
# worker holding it stopped (RabbitMQ needs about 0.05 s; this allows for a loaded machine).
RETURN_WAIT = 5.0


def compile_packages():
    """Write the bytecode (.pyc files) of the nightjar package and the grader beside them, where
    it is missing or stale.

    Every worker a lab starts imports nightjar with PYTHONDONTWRITEBYTECODE
    set (and a sandboxed one could not write there anyway): without them each
    worker compiles the same modules again, about 15 ms of CPU a start, 22
    starts a graded handler; and the next `make grade` imports the grader
    sooner. A folder that cannot be written is left as it is.
    """
    for package in ("nightjar", "grader"):
        compileall.compile_dir(REPO_ROOT / package, quiet=2)


def wait_until(condition, timeout, interval=0.03):
    """True as soon as condition() is true (asked at least once), False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)


def copy_workstation(folder, handler=None):
    """A new Workstation folder: ticket-desk's programs and `handler` (default: the starting handler.py)."""
    folder = Path(folder)
    folder.mkdir(parents=True)
    for program in WORKSTATION_PROGRAMS:
        shutil.copyfile(TICKET_DESK / program, folder / program)
    shutil.copyfile(handler or TICKET_DESK / "handler.py", folder / "handler.py")
    return folder


class Lab:
    """One throwaway lab on the broker at amqp_url.

    folder:       where its database (and Workstation copy) go; default a
                  temporary folder of its own, removed by cleanup()
    handler:      the handler.py to copy into its Workstation folder
    workstation:  an existing Workstation folder to run in instead (several
                  labs may share one)
    queue_prefix, label: its queue is <queue_prefix>.<random>[.<label>]
    extra_env:    more environment for its programs
    delete_queues: False on a private node that is thrown away whole
    worker_timeout: how long one interrupted or watched worker run may take
                  before it is killed
    trial:        a Trial (nightjar/sandbox/trial.py): the lab's programs run
                  in the sandbox (as its user, in its root, on its network;
                  `workstation` is the sandbox's copy), and the lab lives in
                  the trial's folder; its queue name tells nothing of the
                  check (no label)
    """

    def __init__(self, amqp_url, *, folder=None, handler=None, workstation=None,
                 queue_prefix="nightjar.lab", label="", extra_env=None, delete_queues=True,
                 worker_timeout=30.0, trial=None):
        self._tmp = None
        self.trial = trial
        if trial is not None:
            folder, label = trial.folder, ""
        elif folder is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="nightjar-lab-")
            folder = self._tmp.name
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.workstation = Path(workstation or copy_workstation(self.folder / "ticket-desk", handler))
        self.db_path = str(self.folder / "nightjar.db")
        self.queue = f"{queue_prefix}.{uuid.uuid4().hex[:12]}" + (f".{label}" if label else "")
        if trial is not None:
            # Made here, then given to the trial's user: SQLite run as root gives the
            # files it adds later (-wal, -shm) the database file's owner and mode.
            database.connect(self.db_path).close()
            trial.give(self.db_path)
        self.amqp_url = amqp_url  # a test may point the lab at another broker
        self.extra_env = dict(extra_env or {})
        self.delete_queues = delete_queues
        self.worker_timeout = worker_timeout
        self._connection = None
        self._connected_to = None
        self._declared = False
        self._channel = None  # _use_channel's kept channel
        self._runs = 0
        self._started = []
        self.story = []  # the grader's record of each watched worker run (grader/handler/trial_story.py)

    @property
    def settings(self):
        return Settings(amqp_url=self.amqp_url, db_path=self.db_path, queue=self.queue)

    @property
    def env(self):
        """The environment of the lab's programs (its own settings, none of the caller's)."""
        if self.trial is not None:
            return self.trial.env({
                **{k: v for k, v in self.extra_env.items() if k.startswith("NIGHTJAR_")},
                "NIGHTJAR_AMQP_URL": self.trial.amqp_url,
                "NIGHTJAR_DB": str(self.trial.inside(self.db_path)),
                "NIGHTJAR_QUEUE": self.queue})
        return processes.program_env(self.settings, self.extra_env, isolated=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    # ---- the site's side: registrations and deliveries -------------------------

    def register(self, name):
        """Save and queue a guest through the site's code path; the registration ID.
        reading.Tampered when an index handler.py added refuses the site's write."""
        try:
            registration_id, queued = queueing.register_at(self.db_path, self.settings, name)
        except sqlite3.Error as error:
            db = sqlite3.connect(self.db_path, timeout=30)
            try:
                refused = reading.refused_write(
                    db, error, f"saving a new registration named {name!r}")
            finally:
                db.close()
            raise refused or error
        if not queued:
            raise broker.BrokerUnavailable(f"RabbitMQ did not confirm the job of {registration_id}")
        return registration_id

    def deliver_again(self, registration_id):
        """A new delivery of an existing registration, as `desk.py retry` makes one."""
        name = self._read(lambda db: registrations.get(db, registration_id).name)
        db = database.connect(self.db_path)
        try:
            with queueing.publisher(self.settings) as channel:
                queueing.queue_registration(db, channel, self.settings, registration_id, name)
        finally:
            db.close()

    def publish_raw(self, body):
        """Put any bytes in the lab's queue, as a broken publisher would."""
        self._use_channel(lambda channel: channel.basic_publish(
            "", self.queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True))

    # ---- the database --------------------------------------------------------------

    def db(self):
        return database.connect(self.db_path)

    def _read(self, read):
        """read(db) on a checked copy of the lab's tables (reading.py): the same reads on every
        route, which no index, view or trigger of the handler's can change."""
        if self.trial is not None:
            # Only while none of the trial's processes runs, and only real files:
            # what the sandbox left cannot fool the read.
            with self.trial.frozen():
                self.trial.check_files()
                return self._read_now(read)
        return self._read_now(read)

    def _read_now(self, read):
        source = sqlite3.connect(self.db_path, timeout=30)  # no schema work: only copying
        try:
            copy = reading.lab_tables(source)
        finally:
            source.close()
        try:
            return read(copy)
        finally:
            copy.close()

    def unique_keys(self, table):
        """[(description, columns)] of the UNIQUE indexes handler.py left on a lab table:
        ("UNIQUE index 'x' on tickets(name)", "name"); an expression's column is "?"."""
        return self._read(lambda db: [(reading.describe_index(name, sql), key)
                                      for name, sql, key in reading.unique_indexes(db, table)])

    def tickets(self, registration_id=None):
        """[registrations.Ticket] of one registration, or of all, in number order."""
        if registration_id is None:
            return self._read(registrations.all_tickets)
        return self._read(lambda db: registrations.tickets_for(db, registration_id))

    def completed(self, registration_id):
        """Is the registration recorded in the completed table?"""
        return bool(self._read(lambda db: db.execute(
            "SELECT 1 FROM completed WHERE id = ?", (registration_id,)).fetchall()))

    def completed_keys(self):
        """Every key in the completed table, as text."""
        return self._read(lambda db: [str(key) for (key,) in db.execute(
            "SELECT id FROM completed ORDER BY rowid")])

    def hold_write_lock(self):
        """A connection holding SQLite's write lock (BEGIN IMMEDIATE); rollback() releases it."""
        holder = sqlite3.connect(self.db_path, isolation_level=None, timeout=30)
        holder.execute("BEGIN IMMEDIATE")
        return holder

    # ---- the queues ----------------------------------------------------------------

    def _use_channel(self, use, throwaway=False):
        """use(channel) on the lab's own connection (opened again once if it was lost), on its
        kept channel, or, throwaway, on a channel of its own closed afterwards (what use() took
        without acknowledging goes back to the queue)."""
        for attempt in (1, 2):
            if (self._connection is None or not self._connection.is_open
                    or self._connected_to != self.amqp_url):
                self._close_connection()
                self._connection = broker.connect(self.settings)
                self._connected_to = self.amqp_url
                self._declared = False
            try:
                if throwaway:
                    channel = self._connection.channel()
                else:  # kept: opening and closing a channel for each poll cost more than the poll
                    if self._channel is None or not self._channel.is_open:
                        self._channel = self._connection.channel()
                    channel = self._channel
                try:
                    if not self._declared:
                        broker.declare_queues(channel, self.settings)
                        self._declared = True
                    return use(channel)
                finally:
                    if throwaway and channel.is_open:
                        channel.close()
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.StreamLostError,
                    pika.exceptions.ConnectionWrongStateError):
                self._connection = None
                if attempt == 2:
                    raise

    def _close_connection(self):
        try:
            if self._connection is not None and self._connection.is_open:
                self._connection.close()
        except (pika.exceptions.AMQPError, OSError):
            pass
        self._connection = None

    def ready(self):
        """Messages ready in the lab's queue (nothing is consumed)."""
        return self._use_channel(lambda channel: broker.ready_count(channel, self.queue))

    def dead_lettered(self):
        """Messages in the lab's dead-letter queue."""
        return self._use_channel(
            lambda channel: broker.ready_count(channel, self.settings.dead_letter_queue))

    def queued(self, limit=20):
        """(ready, dead-lettered): the registration IDs of the messages in the lab's two queues,
        at most `limit` each. They are taken and given back, so only once the trial is over."""
        def ids(queue):
            def peek(channel):  # unacknowledged: the channel's close gives them back
                found = []
                while len(found) < limit:
                    method, _, body = channel.basic_get(queue)
                    if method is None:
                        break
                    try:
                        found.append(str(json.loads(body)["id"]))
                    except (ValueError, TypeError, KeyError):
                        found.append("(not a registration)")
                return found
            return self._use_channel(peek, throwaway=True)
        return ids(self.queue), ids(self.settings.dead_letter_queue)

    def depth(self):
        """(ready, dead-lettered)."""
        return self.ready(), self.dead_lettered()

    def comes_back(self, more_than=0, timeout=RETURN_WAIT):
        """True once more than `more_than` messages are ready (an interrupted delivery returned)."""
        return wait_until(lambda: self.ready() > more_than, timeout)

    def stays_empty(self, timeout):
        """True when no message is (or comes back) ready within `timeout` seconds."""
        return not wait_until(lambda: self.ready() > 0, timeout, interval=0.05)

    # ---- the Workstation programs --------------------------------------------------

    def run(self, program, *args, input="", timeout=30):
        """Run worker.py or desk.py to the end; a CompletedProcess with text output."""
        if self.trial is not None:
            raise NotImplementedError("a sandboxed lab starts its programs with start()")
        return processes.run(self.workstation, self.env, program, *args, input=input,
                             timeout=timeout)

    def start(self, program, *args, watch=False, stop_at=None, db_timeout=None, stderr_limit=None):
        """Start worker.py or desk.py with pipes; a processes.Running.

        watch: run it under the effects watcher (nightjar/harness/effects.py),
        with its events (nightjar/events.py) read at the end; stop_at=EFFECT
        makes the worker kill itself at that real effect; db_timeout sets
        SQLite's busy timeout of its connections.
        """
        watched = watch or stop_at or db_timeout is not None
        if self.trial is None and not watched:
            started = processes.start(self.workstation, self.env, program, *args,
                                      stderr_limit=stderr_limit)
            self._started.append(started)
            return started
        env, events_path = self.env, None
        workstation = self.workstation if self.trial is None else self.trial.inside(self.workstation)
        python = [sys.executable] if self.trial is None else self.trial.python()
        command = [*python, str(workstation / program)]
        if watched:
            self._runs += 1
            events_path = self.folder / f"events-{self._runs}.jsonl"
            command = [*python, "-m", "nightjar.harness.effects", "--parent", str(os.getpid())]
            if stop_at:
                command += ["--stop", stop_at]
            if db_timeout is not None:
                command += ["--db-timeout", str(db_timeout)]
            command += ["--", str(workstation / program)]
            env["NIGHTJAR_EVENTS"] = str(events_path if self.trial is None
                                         else self.trial.inside(events_path))
        if self.trial is None:
            started = processes.start(self.workstation, env, command, *args,
                                      events_path=events_path, stderr_limit=stderr_limit)
        else:
            # A worker comes from the submission's launcher: the same run, its imports made once.
            run = [*command[len(python):], *args]
            forked = ((lambda: self.trial.launch(run, env, workstation))
                      if program == "worker.py" else None)
            command, fds = self.trial.command(command, workdir=workstation)
            started = processes.start(None, env, command, *args, events_path=events_path,
                                      stderr_limit=stderr_limit, pass_fds=fds,
                                      on_end=self.trial.after_run, forked=forked,
                                      members=self.trial.group.pids, peers=self.trial.relay_pids)
        self._started.append(started)
        return started

    def cleanup(self):
        """Stop its programs; delete its queues (unless told not to) and its own temporary folder."""
        for started in self._started:
            if started.process.poll() is None:
                started.stop()
        try:
            if self.delete_queues:
                self._use_channel(lambda channel: [channel.queue_delete(queue) for queue in
                                                   (self.queue, self.settings.dead_letter_queue)])
        except (pika.exceptions.AMQPError, broker.BrokerUnavailable, OSError):
            pass
        self._close_connection()
        if self._tmp is not None:
            self._tmp.cleanup()
        if self.trial is not None:
            self.trial.close()
