"""A grading host of the farm (see grader/farm/): takes jobs, grades them in the sandbox, returns results.

    python3 -m grader serve --farm URL [--slots N] [--name NAME]
                            [--amqp-url URL [--management-url URL]] [--timeout S]

Needs root: every job is graded in the sandbox of nightjar/sandbox/,
on a grading node of the host's own (a private RabbitMQ node started once,
or the --amqp-url broker). Up to N jobs at once (the prefetch is N), each by
its own grader subprocess, exactly as a local batch grades one submission
(grader/class_run/batch.py). For each job: grade, publish the result and wait for the
broker's confirm, and only then ack the job. A job whose host dies is
returned to the queue by RabbitMQ and graded by another host.

Ctrl+C takes no more jobs and stops once the current ones are done; a second
Ctrl+C (or SIGTERM, as `docker compose stop` sends) stops at once. Either
way an unfinished job goes back to the queue. A lost farm broker is connected
to again; the jobs graded meanwhile go back to the queue.
"""

import argparse
import functools
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pika.exceptions

from nightjar.config import redact_url
from nightjar import sandbox
from nightjar.harness.rabbitnode import NodeError, PrivateNode
from nightjar.rabbitadmin import default_management_url

from grader import farm
from grader.class_run import batch
from grader.handler.findings import TOO_BUSY
from grader.options import add_time_limits

BUSY_PAUSE = 5.0  # seconds a host waits before putting back a job it was too busy to grade


def parse_options(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m grader serve",
        description="A grading host: take grading jobs from the farm broker, grade each in a"
                    " sandbox, publish its result, then ack the job.")
    parser.add_argument("--farm", required=True, metavar="URL",
                        help="the farm broker's AMQP URL (amqp://user:password@host:5672/vhost)")
    # A grading is CPU-bound: one job a core keeps the cores busy and no grading waits for them.
    parser.add_argument("--slots", type=int, metavar="N",
                        default=os.environ.get("NIGHTJAR_FARM_SLOTS") or len(os.sched_getaffinity(0)),
                        help="jobs graded at the same time (default: NIGHTJAR_FARM_SLOTS, else the"
                             " number of cores)")
    parser.add_argument("--name", default=socket.gethostname(),
                        help="this host's name in the results (default: the machine's name)")
    parser.add_argument("--amqp-url", metavar="URL",
                        help="a broker to grade on, with an administrator's login (default: a"
                             " private RabbitMQ node of this host's own)")
    parser.add_argument("--management-url", metavar="URL",
                        help="that broker's management API (default: port 15672 on its host)")
    add_time_limits(parser)
    options = parser.parse_args(argv)
    if options.slots < 1:
        parser.error("--slots needs a number of 1 or more")
    if options.management_url and not options.amqp_url:
        parser.error("--management-url goes with --amqp-url")
    return options


def say(text):
    print(text, flush=True)


class StopNow(Exception):
    """A second Ctrl+C, or SIGTERM: stop without waiting for the current jobs."""


class Session:
    """One connection to the farm broker, and the jobs taken on it."""

    def __init__(self, connection, slots):
        self.connection = connection
        self.jobs = connection.channel()
        farm.declare(self.jobs)
        self.jobs.basic_qos(prefetch_count=slots)
        self.results = connection.channel()
        self.results.confirm_delivery()
        self.graders = batch.Graders()
        self.running = {}  # delivery tag -> grading thread
        self.consumer = None

    def give_back(self):
        """Stop the gradings of this session (their jobs return to the queue with the connection)."""
        self.graders.stop_all()
        for thread in list(self.running.values()):
            thread.join(timeout=30)
        try:
            self.connection.close()
        except farm.CONNECTION_LOST + (pika.exceptions.AMQPError,):
            pass


class Host:
    def __init__(self, options, grading):
        self.options, self.grading = options, grading
        self.scratch = Path(tempfile.mkdtemp(prefix="nightjar-farm-host-"))
        self.stopping = False  # after the current jobs
        self.count = 0

    def serve(self, connection=None):
        """Take jobs until stopped (on `connection` first, if given); connect again whenever the
        farm broker is lost."""
        waiting_said, delay = False, 1.0
        while not self.stopping:
            try:
                session = Session(connection or farm.connect(self.options.farm), self.options.slots)
                connection = None
            except farm.FarmRefused:
                raise
            except farm.FarmUnavailable as error:
                if not waiting_said:
                    say(f"Waiting for the farm broker: {error}.")
                    waiting_said = True
                time.sleep(delay)
                delay = min(delay * 2, 10.0)
                continue
            except farm.CONNECTION_LOST:
                time.sleep(delay)  # lost while setting up: the same as unreachable
                continue
            say(f"Connected to the farm broker; taking up to {farm.counted(self.options.slots, 'job')} at once.")
            waiting_said, delay = False, 1.0
            try:
                self.take_jobs(session)
                session.give_back()
                return
            except farm.CONNECTION_LOST as error:
                unfinished = len(session.running)
                session.give_back()
                say(f"Lost the farm broker ({type(error).__name__}); {farm.counted(unfinished, 'unfinished job')}"
                    " went back to the queue. Connecting again.")
            except BaseException:
                session.give_back()
                raise

    def take_jobs(self, session):
        session.consumer = session.jobs.basic_consume(
            farm.JOBS, functools.partial(self.on_job, session))
        while session.running or session.consumer:
            session.connection.process_data_events(time_limit=0.5)
            if session.consumer and session.consumer not in session.jobs.consumer_tags:
                # RabbitMQ cancelled the consumer: someone deleted the jobs queue.
                say("The farm's jobs queue was deleted; declaring it again.")
                farm.declare(session.jobs)
                session.consumer = session.jobs.basic_consume(
                    farm.JOBS, functools.partial(self.on_job, session))
            if self.stopping and session.consumer:
                session.jobs.basic_cancel(session.consumer)
                session.consumer = None
                if session.running:
                    say(f"Stopping after the current {farm.counted(len(session.running), 'job')}"
                        " (Ctrl+C again stops now).")

    def on_job(self, session, channel, method, properties, body):
        tag = method.delivery_tag
        try:
            job = farm.read_job(body)
        except farm.Refused as refusal:
            self.refuse(session, tag, properties, str(refusal))
            return
        self.count += 1
        again = " (again: its last host stopped)" if method.redelivered else ""
        say(f"Took {job.submission!r} (job {job.job_id}){again}.")
        thread = threading.Thread(target=self.grade,
                                  args=(session, tag, job, properties.reply_to, self.count,
                                        (body, properties, method.routing_key)),
                                  daemon=True)
        session.running[tag] = thread
        thread.start()

    def refuse(self, session, tag, properties, reason):
        """A job this host cannot read: its batch learns why; with no batch to tell, it is dead-lettered."""
        say(f"Refused a job: {reason}.")
        if properties.reply_to and properties.message_id:
            submission = batch.Submission("", farm.ERROR,
                                          note=f"refused by grading host {self.options.name}: {reason}")
            self.publish_and_ack(session, tag, properties.message_id, submission, 0.0,
                                 properties.reply_to)
        else:
            session.jobs.basic_reject(tag, requeue=False)

    def grade(self, session, tag, job, reply_to, number, message):
        """In a thread: grade the job as a local batch grades a submission, then hand the result
        over; or, when this machine was too busy to grade it, put it back (message: the job's
        body, properties and routing key)."""
        started = time.monotonic()
        folder = self.scratch / f"job-{number}"
        try:
            (folder / "submission").mkdir(parents=True)
            for name, data in job.files.items():
                (folder / "submission" / name).write_bytes(data)
            submission = batch.grade_one(session.graders, job.submission,
                                         folder / "submission" / "handler.py", self.grading,
                                         self.options, folder / "tmp", "linux")
        except RuntimeError:  # the session was given back: the job returns to the queue
            return
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        seconds = time.monotonic() - started
        finish = functools.partial(self.publish_and_ack, session, tag, job.job_id, submission,
                                   seconds, reply_to)
        tries = farm.busy_tries(message[1]) + 1
        if submission.status == farm.ERROR and TOO_BUSY in submission.note and tries < farm.BUSY_TRIES:
            time.sleep(BUSY_PAUSE)  # a later try, or another host's
            finish = functools.partial(self.put_back, session, tag, job, *message, tries)
        try:
            session.connection.add_callback_threadsafe(finish)
        except farm.CONNECTION_LOST + (pika.exceptions.AMQPError,):
            session.running.pop(tag, None)  # the connection is gone, and the job with it

    def publish_and_ack(self, session, tag, job_id, submission, seconds, reply_to):
        """In the connection's thread: the result, confirmed, then the ack."""
        body, properties = farm.result_message(job_id, submission, self.options.name, seconds)
        try:
            session.results.basic_publish("", reply_to, body, properties, mandatory=True)
            outcome = (f"{submission.result}, {submission.checks_passed()} checks passed"
                       if submission.status == farm.GRADED else f"{submission.result}: {submission.note}")
        except pika.exceptions.UnroutableError:
            outcome = "its batch is gone (no results queue), so the result was dropped"
        except pika.exceptions.NackError:
            session.jobs.basic_nack(tag, requeue=True)
            session.running.pop(tag, None)
            say(f"The farm broker refused the result of job {job_id}; the job goes back to the queue.")
            return
        session.jobs.basic_ack(tag)
        session.running.pop(tag, None)
        if submission.name:
            say(f"Done {submission.name!r} (job {job_id}): {outcome} ({seconds:.1f} s).")


    def put_back(self, session, tag, job, body, properties, routing_key, tries):
        """In the connection's thread: the job again, confirmed, for another host or a later
        try; then the ack."""
        try:
            session.results.basic_publish(farm.JOBS, routing_key, body,
                                          farm.job_again(properties, tries), mandatory=True)
        except (pika.exceptions.UnroutableError, pika.exceptions.NackError):
            session.jobs.basic_nack(tag, requeue=True)  # as the job was, then
            session.running.pop(tag, None)
            return
        session.jobs.basic_ack(tag)
        session.running.pop(tag, None)
        say(f"Too busy to grade {job.submission!r} (job {job.job_id}): put back for another"
            f" try ({tries} of {farm.BUSY_TRIES} too busy).")


def start_grading_broker(options, scratch):
    """((AMQP URL, management URL), node or None): where this host grades."""
    if options.amqp_url:
        return (options.amqp_url, options.management_url or default_management_url(options.amqp_url)), None
    node = PrivateNode(base=scratch, remove_if_orphaned=scratch).start()
    node.wait_ready()
    return (node.url, node.management_url), node


def main(argv):
    options = parse_options(argv)
    reason = sandbox.unavailable_reason()
    if reason:
        print(f"Cannot serve: a grading host grades every job in a sandbox, and {reason}.",
              file=sys.stderr)
        return 2
    host = None

    def on_interrupt(signum, frame):
        if signum == signal.SIGINT and host is not None and not host.stopping:
            host.stopping = True
            return
        raise StopNow

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, on_interrupt)
    signal.signal(signal.SIGHUP, on_interrupt)
    connection = None
    try:  # a wrong login is said at once, before a grading node is started for nothing
        connection = farm.connect(options.farm)
    except farm.FarmRefused as error:
        print(f"Cannot serve: {error}", file=sys.stderr)
        return 2
    except farm.FarmUnavailable:
        pass  # serve() waits for it, saying so
    scratch = Path(tempfile.mkdtemp(prefix="nightjar-farm-"))
    node = None
    try:
        grading, node = start_grading_broker(options, scratch)
        host = Host(options, grading)
        where = "the given broker" if options.amqp_url else "a private RabbitMQ node"
        say(f"Grading host {options.name}: farm broker {redact_url(options.farm)}, grading on"
            f" {where} in a sandbox per job, {farm.counted(options.slots, 'job')} at a time."
            " Ctrl+C stops after the current jobs.")
        host.serve(connection)
        say(f"Stopped after {farm.counted(host.count, 'job')}.")
        return 0
    except StopNow:
        say("Stopped now; unfinished jobs went back to the queue.")
        return 130
    except NodeError as error:
        print(f"Cannot serve: could not start a private RabbitMQ node for grading: {error}",
              file=sys.stderr)
        return 2
    except farm.FarmUnavailable as error:
        print(f"Cannot serve: {error}", file=sys.stderr)
        return 2
    except farm.Refusal as error:
        print(f"Cannot serve: {farm.refusal_text(error)}", file=sys.stderr)
        return 2
    finally:
        if node is not None:
            node.stop()
        if host is not None:
            shutil.rmtree(host.scratch, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
