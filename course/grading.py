"""The course's Grades on its grading farm (grader/farm/): one connection and one results queue
for the service's whole life, and each verdict handed over as soon as its result is stored.

    grading = Grading(farm_url, on_verdict)     # on_verdict(learner, handler, Submission)
    grading.start()                             # on the service's event loop
    submission = await grading.grade(learner, handler_bytes)
    await grading.close()

Every Grade, a learner's or one of Grade all's, is a job of the service's standing farm batch,
kept with its handler.py in grading.sqlite (grader/farm/collector.py's Store; beside the
collector's batches under var/farm/). A thread of its own holds the farm connection:
it publishes each job as the collector does (confirmed by the broker before it counts as
published), and takes the results from the batch's own quorum queue, declared once. A result
is stored, handed to on_verdict on the event loop (the service keeps it there), given to the
Grades waiting for it, and only then acked. A second result for a job (a host that died between
publishing and acking) is counted once; a job the farm set aside comes back as not graded.
Started again after a stop, it publishes what it had not published and hands over what was
stored but not handed over. Nothing is started per Grade: no process, no queue.
"""

import asyncio
import queue
import secrets
import sys
import threading
from pathlib import Path

import pika.exceptions

from grader import farm
from grader.farm.collector import Collector, Store, digest, publish_job
from grader.reports import ERROR, Submission
from nightjar.config import local_var_folder

GRADING_SECONDS = 900  # how long a Grade waits for its verdict before it answers "not graded"


class Jobs(Store):
    """The standing batch: the collector's Store, its ID, and each job's handler.py until its
    verdict is handed over."""

    SCHEMA = Store.SCHEMA + """
        CREATE TABLE IF NOT EXISTS batch (id TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS handlers (job TEXT PRIMARY KEY, handler BLOB NOT NULL);
    """

    def batch_id(self):
        row = self.db.execute("SELECT id FROM batch").fetchone()
        if row is None:
            row = ("course-" + secrets.token_hex(4),)
            self.db.execute("INSERT INTO batch VALUES (?)", row)
        return row[0]

    def add(self, batch_id, learner, handler):
        """A new job for this learner's handler.py: its ID."""
        with self.db:
            self.db.execute("BEGIN")
            position = self.db.execute("SELECT coalesce(max(position) + 1, 0) FROM jobs").fetchone()[0]
            job = f"{batch_id}-{position}"
            self.db.execute("INSERT INTO jobs (job, position, submission, digest) VALUES (?, ?, ?, ?)",
                            (job, position, learner, digest(handler)))
            self.db.execute("INSERT INTO handlers VALUES (?, ?)", (job, handler))
        return job

    def unpublished(self):
        """[(job ID, learner, handler.py)] not yet confirmed by the farm broker, oldest first."""
        return self.db.execute("SELECT job, submission, handler FROM jobs JOIN handlers USING (job)"
                               " WHERE published = 0 ORDER BY position").fetchall()

    def not_handed_over(self):
        """The jobs whose result is stored but whose verdict was not handed over (a stop between)."""
        return [job for job, in self.db.execute(
            "SELECT job FROM jobs JOIN handlers USING (job) WHERE status IS NOT NULL ORDER BY position")]

    def handler(self, job):
        return self.db.execute("SELECT handler FROM handlers WHERE job = ?", (job,)).fetchone()[0]

    def handed_over(self, job):
        self.db.execute("DELETE FROM handlers WHERE job = ?", (job,))


class Grading:
    """The service's Grades on the farm. grade() is for the event loop."""

    def __init__(self, farm_url, on_verdict=None, folder=None):
        self.farm_url = farm_url
        self.path = Path(folder or local_var_folder() / "farm") / "grading.sqlite"
        self.on_verdict = on_verdict or (lambda learner, handler, submission: None)
        self.verdicts = 0          # handed over since the start
        self._requests = queue.SimpleQueue()  # (learner, handler, future), for the thread
        self._waiting = {}         # job ID -> [future]: the thread's own
        self._stopping = threading.Event()
        self._loop = self._thread = self._connection = None

    def start(self):
        """Start the farm's thread (once), on the running event loop."""
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="farm grading", daemon=True)
            self._thread.start()

    async def grade(self, learner, handler):
        """The Submission the farm gives this handler.py (bytes); not graded (ERROR) when none
        came within GRADING_SECONDS or the farm broker refused the service."""
        self.start()
        future = self._loop.create_future()
        self._requests.put((learner, handler, future))
        self._wake()
        try:
            return await asyncio.wait_for(asyncio.shield(future), GRADING_SECONDS)
        except asyncio.TimeoutError:  # its verdict is still handed over when it comes
            return Submission(learner, ERROR, note=f"not graded: no verdict in {GRADING_SECONDS} s")

    async def close(self):
        """Stop the thread (the event loop runs meanwhile: a verdict may be on its way to it);
        what is unfinished stays stored for the next start."""
        self._stopping.set()
        self._wake()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10)

    # ---- the farm's thread ---------------------------------------------------------------------

    def _wake(self):
        connection = self._connection
        try:
            if connection is not None:
                connection.add_callback_threadsafe(lambda: None)
        except (pika.exceptions.AMQPError, RuntimeError):
            pass  # closed: the thread connects again and takes the request then

    def _run(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        jobs = Jobs(self.path)
        batch_id = jobs.batch_id()
        collector = Collector(batch_id, jobs, 0, None)
        for job in jobs.not_handed_over():
            self._hand_over(jobs, job)
        delay = 1.0
        while not self._stopping.is_set():
            try:
                self._connection = farm.connect(self.farm_url)
            except farm.FarmUnavailable as error:
                self._take_requests(jobs, batch_id, None)
                if isinstance(error, farm.FarmRefused):  # waiting would not help these Grades
                    self._not_graded(str(error))
                self._stopping.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 1.0
            try:
                self._serve(jobs, batch_id, collector)
            except farm.CONNECTION_LOST + (pika.exceptions.UnroutableError,):
                pass  # connect again: what was not confirmed is published again
            except farm.Refusal as error:
                self._not_graded(farm.refusal_text(error))
                self._stopping.wait(10.0)
            except Exception as error:  # never a service that silently stops grading
                if self._loop.is_closed():
                    break
                print(f"The farm's grading met an error, and connects again: {error!r}",
                      file=sys.stderr, flush=True)
                self._stopping.wait(delay)
            finally:
                connection, self._connection = self._connection, None
                try:
                    connection.close()
                except farm.CONNECTION_LOST + (pika.exceptions.AMQPError,):
                    pass
        jobs.close()

    def _serve(self, jobs, batch_id, collector):
        publishing = self._connection.channel()
        farm.declare(publishing)
        results = farm.declare_results(publishing, batch_id)
        publishing.confirm_delivery()
        for job, learner, handler in jobs.unpublished():
            publish_job(publishing, jobs, farm.Job(batch_id, job, learner, {"handler.py": handler}))
        consuming = self._connection.channel()
        consuming.basic_qos(prefetch_count=100)

        def on_result(channel, method, properties, body):
            job = collector.take(properties, body)  # None: a duplicate, counted, or ignored
            if job is not None:
                self._hand_over(jobs, job)
            channel.basic_ack(method.delivery_tag)  # after it is stored and handed over

        consuming.basic_consume(results, on_result)
        while not self._stopping.is_set():
            self._take_requests(jobs, batch_id, publishing)
            self._connection.process_data_events(time_limit=1.0)

    def _take_requests(self, jobs, batch_id, channel):
        """Store each new Grade as a job, and publish it when connected."""
        while True:
            try:
                learner, handler, future = self._requests.get_nowait()
            except queue.Empty:
                return
            job = jobs.add(batch_id, learner, handler)
            self._waiting.setdefault(job, []).append(future)
            if channel is not None:
                publish_job(channel, jobs, farm.Job(batch_id, job, learner, {"handler.py": handler}))

    def _hand_over(self, jobs, job):
        """A stored result to on_verdict and its waiting Grades, on the event loop; then forgotten."""
        submission = jobs.submission(job)
        handed = asyncio.run_coroutine_threadsafe(
            self._verdict(submission, jobs.handler(job), self._waiting.pop(job, [])), self._loop)
        handed.result()
        jobs.handed_over(job)

    async def _verdict(self, submission, handler, futures):
        try:
            self.on_verdict(submission.name, handler, submission)
        except Exception as error:  # the Grade still gets its verdict
            print(f"Could not keep {submission.name}'s verdict: {error!r}", file=sys.stderr, flush=True)
        self.verdicts += 1
        for future in futures:
            if not future.done():
                future.set_result(submission)

    def _not_graded(self, reason):
        """The Grades waiting now are told why the farm cannot grade them."""
        waiting, self._waiting = self._waiting, {}
        submissions = [(future, Submission("", ERROR, note=f"not graded: {reason}"))
                       for futures in waiting.values() for future in futures]
        self._loop.call_soon_threadsafe(lambda: [future.set_result(submission) for future, submission
                                                 in submissions if not future.done()])
