"""The instructor's side of the grading farm (see grader/farm/): publish a class, collect its results.

    python3 -m grader --handlers DIR --farm URL [--batch ID] [--json] [--junit FILE]

Publishes one job per submission (its handler.py's bytes and a job ID), each
confirmed by the broker, then takes results from the batch's own queue until
every submission has exactly one, and reports the class as a local batch
does (grader/class_run/batch.py): the same table, JSON and JUnit XML.

The batch lives in a SQLite file under var/farm/ (NIGHTJAR_LOCAL_VAR moves
var/): which jobs were published, and each job's result. A result is acked
only once it is stored there, and a second result for a job already stored
(a host that died between publishing and acking) is counted once. Stopped
with Ctrl+C, the collector is started again with --batch ID: it publishes
only what was not published, and collects only what it lacks.
"""

import hashlib
import json
import re
import secrets
import sqlite3
import sys
import time

import pika.exceptions

from nightjar.config import local_var_folder, redact_url

from grader import farm, reports
from grader.class_run import batch
from grader.reports import ERROR, REFUSED, Submission

BATCH_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# Without a result for this long, the collector says how many jobs wait and how many hosts serve.
QUIET_NOTE_SECONDS = 30


class FarmError(Exception):
    """The batch cannot go on; the text says why in one line."""


def new_batch_id():
    return time.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


def say(text, out=sys.stdout):
    print(text, file=out, flush=True)


class Store:
    """A batch's jobs and results, in SQLite: the collector's memory across stops."""

    SCHEMA = """
        CREATE TABLE IF NOT EXISTS jobs (
            job TEXT PRIMARY KEY, position INTEGER NOT NULL, submission TEXT NOT NULL,
            digest TEXT NOT NULL, published INTEGER NOT NULL DEFAULT 0,
            status TEXT, checks TEXT, note TEXT, host TEXT, seconds REAL);
        CREATE TABLE IF NOT EXISTS counts (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
    """

    def __init__(self, path):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)  # each statement commits itself
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(self.SCHEMA)

    def jobs(self):
        return self.db.execute("SELECT job, position, submission, digest, published, status"
                               " FROM jobs ORDER BY position").fetchall()

    def add_jobs(self, rows):
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT INTO jobs (job, position, submission, digest)"
                                " VALUES (?, ?, ?, ?)", rows)

    def mark_published(self, job):
        self.db.execute("UPDATE jobs SET published = 1 WHERE job = ?", (job,))

    def record(self, job, status, checks, note, host, seconds):
        """True when this is the job's first result; a later one only adds to the duplicates."""
        stored = self.db.execute(
            "UPDATE jobs SET status = ?, checks = ?, note = ?, host = ?, seconds = ?"
            " WHERE job = ? AND status IS NULL",
            (status, json.dumps(checks, ensure_ascii=False), note, host, seconds, job)).rowcount
        if not stored:
            self.db.execute("INSERT INTO counts VALUES ('duplicates', 1) ON CONFLICT (name)"
                            " DO UPDATE SET value = value + 1")
        return bool(stored)

    def knows(self, job):
        return self.db.execute("SELECT 1 FROM jobs WHERE job = ?", (job,)).fetchone() is not None

    def missing(self):
        return self.db.execute("SELECT count(*) FROM jobs WHERE status IS NULL").fetchone()[0]

    def duplicates(self):
        row = self.db.execute("SELECT value FROM counts WHERE name = 'duplicates'").fetchone()
        return row[0] if row else 0

    def submission(self, job):
        status, checks, note, host, seconds, name = self.db.execute(
            "SELECT status, checks, note, host, seconds, submission FROM jobs WHERE job = ?",
            (job,)).fetchone()
        return Submission(name, status, json.loads(checks), note or "", seconds or 0.0, host or "")

    def close(self):
        self.db.close()


def digest(data):
    return hashlib.sha256(data).hexdigest()


def open_batch(options, found):
    """(batch ID, Store, {position: job ID}) for this class; a new batch unless --batch; FarmError."""
    batch_id = options.batch or new_batch_id()
    if not BATCH_ID.fullmatch(batch_id):
        raise FarmError(f"a batch ID is up to 64 letters, digits, '.', '_' or '-': {batch_id!r}")
    folder = local_var_folder() / "farm"
    path = folder / f"{batch_id}.sqlite"
    if options.batch and not path.is_file():
        raise FarmError(f"no batch {batch_id} here (it would be in {path})")
    folder.mkdir(parents=True, exist_ok=True)
    store = Store(path)
    wanted = [(f"{batch_id}-{position}", position, submission.name, digest(handler.read_bytes()))
              for position, (submission, handler) in enumerate(found) if handler is not None]
    stored = [tuple(row[:4]) for row in store.jobs()]
    if not stored:
        store.add_jobs(wanted)
    elif stored != wanted:
        store.close()
        raise FarmError(f"batch {batch_id} was started with other submissions in"
                        f" {options.handlers}; leave out --batch to grade them as a new batch")
    return batch_id, store, {position: job for job, position, *_ in wanted}


def publish(channel, store, batch_id, found):
    """Publish every job not yet published, each confirmed before it is marked so."""
    for job_id, position, name, _, published, _ in store.jobs():
        if not published:
            handler = found[position][1]
            publish_job(channel, store, farm.Job(batch_id, job_id, name,
                                                 {"handler.py": handler.read_bytes()}))


def publish_job(channel, store, job):
    """One job, on a channel in confirm mode: marked published once the broker confirmed it."""
    body, properties = farm.job_message(job)
    channel.basic_publish(farm.JOBS, farm.results_queue(job.batch), body, properties, mandatory=True)
    store.mark_published(job.job_id)


class Collector:
    def __init__(self, batch_id, store, total, progress):
        self.batch_id, self.store = batch_id, store
        self.total, self.progress = total, progress
        self.last_result = time.monotonic()

    def take(self, properties, body):
        """Store one message from the results queue (a result or a dead job): the job's ID when
        this is its first result, else None (a duplicate, or a message ignored)."""
        reason = farm.death_reason(properties)
        if reason is not None:
            job_id = properties.message_id
            note = (f"its job was set aside after stopping {farm.DELIVERY_LIMIT + 1} grading hosts"
                    " that took it" if reason == "delivery_limit"
                    else f"its job was dead-lettered by the farm broker ({reason})")
            fields = (ERROR, [], note, "", 0.0)
        else:
            try:
                job_id, host, seconds, status, checks, note = farm.read_result(body)
            except farm.Refused as refusal:
                say(f"Ignored a message in the results queue: {refusal}.", sys.stderr)
                return
            fields = (status, checks, note, host, seconds)
        if not isinstance(job_id, str) or not self.store.knows(job_id):
            say(f"Ignored a result for a job not in batch {self.batch_id}: {job_id!r}.", sys.stderr)
            return
        if not self.store.record(job_id, *fields):
            return None
        self.last_result = time.monotonic()
        if self.progress:
            self.progress(self.total - self.store.missing(), self.total, self.store.submission(job_id))
        return job_id

    def collect(self, connection):
        """Take results until none is missing."""
        channel = connection.channel()
        channel.basic_qos(prefetch_count=100)
        queue = farm.results_queue(self.batch_id)
        for method, properties, body in channel.consume(queue, inactivity_timeout=1.0):
            if method is not None:
                self.take(properties, body)
                channel.basic_ack(method.delivery_tag)  # after the result is stored
            if not self.store.missing():
                break
            if time.monotonic() - self.last_result > QUIET_NOTE_SECONDS:
                self.last_result = time.monotonic()
                self.say_waiting(connection)
        channel.cancel()

    def say_waiting(self, connection):
        if not self.progress:
            return
        channel = connection.channel()
        queued = channel.queue_declare(farm.JOBS, passive=True).method
        channel.close()
        say(f"Waiting: {farm.counted(self.store.missing(), 'result')} to come,"
            f" {farm.counted(queued.message_count, 'job')} queued on the farm,"
            f" {farm.counted(queued.consumer_count, 'grading host')} taking jobs.")


def run(options, found, batch_id, store, progress, connection):
    """Publish and collect on `connection`, and on a new one whenever the farm broker is lost."""
    total = sum(handler is not None for _, handler in found)
    collector = Collector(batch_id, store, total, progress)
    waiting_said, delay = False, 1.0
    while store.missing():
        try:
            connection = connection or farm.connect(options.farm)
        except farm.FarmUnavailable as error:
            if not waiting_said:
                say(f"Waiting for the farm broker: {error}.", sys.stderr)
                waiting_said = True
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
            continue
        waiting_said, delay = False, 1.0
        try:
            channel = connection.channel()
            farm.declare(channel)
            farm.declare_results(channel, batch_id)
            channel.confirm_delivery()
            publish(channel, store, batch_id, found)
            collector.collect(connection)
            channel.queue_delete(farm.results_queue(batch_id))
        except pika.exceptions.UnroutableError:
            raise FarmError("the farm broker has no jobs queue to route jobs to") from None
        except farm.Refusal as error:
            raise FarmError(farm.refusal_text(error)) from None
        except farm.CONNECTION_LOST as error:
            say(f"Lost the farm broker ({type(error).__name__}); connecting again.", sys.stderr)
            continue
        finally:
            try:
                connection.close()
            except farm.CONNECTION_LOST + (pika.exceptions.AMQPError,):
                pass
            connection = None


def submissions_of(found, store, jobs):
    """The class's Submissions in discover()'s order: decided here, or from the farm's results."""
    return [store.submission(jobs[position]) if handler is not None else submission
            for position, (submission, handler) in enumerate(found)]


def main(options):
    """Grade the class on the farm; print and write its reports; the exit status."""
    try:
        found = refuse_oversized(batch.discover(options.handlers))
        if not any(handler for _, handler in found):  # nothing to send: the local batch's report
            return batch.report_class(options, [submission for submission, _ in found])
        connection = farm.connect(options.farm)  # a wrong URL or login is said at once
        batch_id, store, jobs = open_batch(options, found)
    except (batch.BatchError, farm.FarmUnavailable, FarmError, OSError, sqlite3.Error) as error:
        return reports.cannot_grade(options, str(error))
    total = len(jobs)
    progress = None
    if not options.json:
        progress = lambda done, count, s: say(reports.progress_line(done, count, s))  # noqa: E731
        say(f"Grading {farm.counted(total, 'submission')} in {options.handlers} on the grading farm at"
            f" {redact_url(options.farm)} (batch {batch_id}; each in a sandbox on a grading host)")
    try:
        run(options, found, batch_id, store, progress, connection)
    except FarmError as error:
        store.close()
        return reports.cannot_grade(options, str(error))
    except KeyboardInterrupt:
        stored = total - store.missing()
        store.close()
        say(f"Collecting stopped with {stored} of {total} results stored; the farm goes on"
            f" grading. Resume with the same command and --batch {batch_id}.", sys.stderr)
        return 130
    submissions = submissions_of(found, store, jobs)
    duplicates = store.duplicates()
    store.close()
    hosts = sorted({s.host for s in submissions if s.host})
    if not options.json:
        say(f"Farm batch {batch_id}: {farm.counted(total, 'result')} from"
            f" {farm.counted(len(hosts), 'grading host')} ({', '.join(hosts) or 'none'});"
            f" {farm.counted(duplicates, 'duplicate result')} counted once.")
    return batch.report_class(options, submissions, farm={
        "batch": batch_id, "hosts": hosts, "duplicates": duplicates})


def refuse_oversized(found):
    """A handler.py larger than a job may carry is refused here, not sent."""
    checked = []
    for submission, handler in found:
        if handler is not None and handler.stat().st_size > farm.HANDLER_LIMIT:
            submission = Submission(submission.name, REFUSED, note=f"refused: handler.py is more"
                                    f" than {farm.HANDLER_LIMIT} bytes, the farm's limit")
            handler = None
        checked.append((submission, handler))
    return checked
