"""Grading a class: every submission folder of DIR against one broker, a few at a time.

    python3 -m grader --handlers DIR [--jobs N] [--amqp-url URL] [--json] [--junit FILE]

Each immediate subfolder of DIR holding a handler.py is one submission, named
after its folder. One private RabbitMQ node is started for the whole class
(or --amqp-url is used). Every submission is graded by its own
`python3 -m grader --handler PATH --skip-live --json --amqp-url URL`
subprocess: the grader gives each check its own queue names and throwaway
database, and the subprocess keeps whatever a submission does (hang, crash,
flood its output, kill its worker or its grader) to that submission. Each one
runs in its own session, under a time limit, with its output read to a
bounded size and its temporary files in a folder of the batch's own.

A submission that could not be graded (its grader stopped, timed out or
reported the grader's own trouble) is graded once more, then listed as not
graded: neither a pass nor the learner's fail.

Sandboxed (the Linux route), the batch makes each submission's control group
itself, and removes it when that submission's grader has ended: whatever the submission
started is killed then, even when its grader was killed first. The
submission's own vhost and user come from its grader (see
nightjar/sandbox/).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from nightjar import broker
from nightjar.config import REPO_ROOT, Settings, redact_url
from nightjar.events import shorten

from grader import reports
from grader.handler.findings import REASON_LIMIT
from grader.reports import files as report_files
from nightjar import sandbox
from nightjar.harness.rabbitnode import NodeError, PrivateNode
from nightjar.rabbitadmin import default_management_url
from grader.reports import ERROR, GRADED, REFUSED, SKIPPED, Submission

# Bytes of a grader's output kept; a grader's JSON report is a few kilobytes.
OUTPUT_LIMIT = 1 << 20
ERRORS_LIMIT = 64 << 10


class BatchError(Exception):
    """The class cannot be graded at all; the text says why in one sentence."""


# ---- finding the submissions -------------------------------------------------------


def _readable(name):
    """A folder name as text that prints and encodes (undecodable bytes become U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _inside(path, folder):
    return path == folder or folder in path.parents


def discover(folder):
    """[(Submission, handler path or None)] in name order; None: decided without grading."""
    base = Path(folder)
    if not base.is_dir():
        raise BatchError(f"no folder at {folder}")
    real = base.resolve()
    try:
        entries = sorted(base.iterdir(), key=lambda p: (p.name.casefold(), p.name))
    except OSError as error:
        raise BatchError(f"cannot read {folder}: {error.strerror}") from None
    if not entries:
        raise BatchError(f"{folder} is empty: it should hold one folder per submission,"
                         " each with a handler.py")
    found = []
    for entry in entries:
        name = _readable(entry.name)
        handler = entry / "handler.py"
        if entry.is_symlink() and not _inside(entry.resolve(), real):
            found.append((Submission(name, REFUSED, note="refused: a link to a folder outside"
                                     f" {folder}"), None))
        elif not entry.is_dir():
            found.append((Submission(name, SKIPPED, note="not a folder"), None))
        elif not handler.is_file():
            found.append((Submission(name, SKIPPED, note="no handler.py"), None))
        elif not _inside(handler.resolve(), real):
            found.append((Submission(name, REFUSED, note="refused: handler.py links to a file"
                                     f" outside {folder}"), None))
        else:
            found.append((Submission(name, GRADED), handler))
    return found


# ---- grading one submission ---------------------------------------------------------------


class Capped:
    """Reads a pipe to its end in a thread, keeping at most `limit` bytes."""

    def __init__(self, pipe, limit):
        self.data, self.dropped, self.limit = bytearray(), 0, limit
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe):
        with pipe:
            while chunk := pipe.read1(65536):
                keep = max(0, self.limit - len(self.data))
                self.data += chunk[:keep]
                self.dropped += len(chunk) - min(keep, len(chunk))

    def text(self):
        self.thread.join(timeout=5)
        return self.data.decode("utf-8", "replace")


class Graders:
    """The grader subprocesses running now, so Ctrl+C can stop them all."""

    def __init__(self):
        self.lock, self.running, self.stopping = threading.Lock(), set(), False

    def start(self, command, env):
        with self.lock:  # none may start once stop_all() has begun
            if self.stopping:
                raise RuntimeError("grading was stopped")
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       start_new_session=True)
            self.running.add(process)
        return process

    def stop(self, process):
        """Kill the grader's process group (anything it left behind goes with it)."""
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        process.wait()
        with self.lock:
            self.running.discard(process)

    def stop_all(self):
        with self.lock:
            self.stopping = True
            running = list(self.running)
        for process in running:
            self.stop(process)


def grade_one(graders, name, handler, broker, options, tmp, route):
    """A Submission from a grader subprocess; whatever the submission does, it does not raise.

    Not graded (the grader stopped, timed out or reported its own trouble: a
    broker or a sandbox that broke) is not the learner's fail: it is graded
    once more, then listed as not graded.
    """
    submission = _grade_once(graders, name, handler, broker, options, tmp, route)
    if submission.status != ERROR:
        return submission
    first = submission.seconds
    submission = _grade_once(graders, name, handler, broker, options,
                             tmp.with_name(tmp.name + "-again"), route)
    submission.seconds += first
    if submission.status == ERROR:
        submission.note = shorten(f"{submission.note} (tried twice)", REASON_LIMIT)
    return submission


def _grade_once(graders, name, handler, broker, options, tmp, route):
    url, management_url = broker
    command = [sys.executable, "-m", "grader", "--handler", str(handler), "--skip-live", "--json",
               "--amqp-url", url, "--timeout", f"{options.timeout:g}", "--batch-parent", str(os.getpid())]
    group = None
    if route == "linux":
        group = sandbox.existing_group(sandbox.new_group_name())
        command += ["--sandbox", "linux", "--sandbox-group", group.name,
                    "--management-url", management_url]
    else:
        command += ["--trusted"]
    tmp.mkdir()
    # The grader's throwaway databases and Workstation copy land in tmp, which
    # the batch deletes even when it had to kill the grader.
    env = dict(os.environ, TMPDIR=str(tmp))
    start = time.monotonic()
    process = graders.start(command, env)
    out, err = Capped(process.stdout, OUTPUT_LIMIT), Capped(process.stderr, ERRORS_LIMIT)
    timed_out = False
    try:
        process.wait(timeout=options.submission_timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        graders.stop(process)
        if group is not None:
            group.remove()  # everything the submission started, however it escaped its grader
    seconds = time.monotonic() - start
    stdout, stderr = out.text(), err.text()
    submission = verdict(name, process.returncode, stdout, out.dropped, stderr, timed_out,
                         options.submission_timeout)
    submission.seconds = seconds
    return submission


def verdict(name, code, stdout, dropped, stderr, timed_out, limit):
    """What one grader subprocess's status and output say about the submission."""
    def error(note):
        return Submission(name, ERROR, note=shorten(note, REASON_LIMIT))

    if timed_out:
        return error(f"grading took longer than {limit:g} s and was stopped")
    if dropped:
        return error(f"the grader's output passed {OUTPUT_LIMIT} bytes and was cut off")
    try:
        report = json.loads(stdout)
    except ValueError:
        report = None
    checks = report.get("checks") if isinstance(report, dict) else None
    if code in (0, 1) and well_formed(checks):
        if (code == 0) != all(c["passed"] for c in checks):
            return error(f"the grader's exit status {code} and its report disagree")
        return Submission(name, GRADED, [_check(c) for c in checks])
    if isinstance(report, dict) and isinstance(report.get("error"), str):
        return error(report["error"])
    if code is not None and code < 0:
        return error(f"the grader was killed by signal {-code}")
    last = ([line for line in stderr.splitlines() if line.strip()] or ["no output"])[-1]
    return error(f"the grader stopped with status {code}: {last.strip()}")


def _check(check):
    """A check as the class report keeps it: its verdict, and the story of a failed one."""
    kept = {k: check[k] for k in ("name", "passed", "reason", "hint")}
    told = check.get("story")
    if (isinstance(check.get("deliveries"), list) and isinstance(check.get("found"), dict)
            and isinstance(told, list) and all(isinstance(line, str) for line in told)):
        kept.update(deliveries=check["deliveries"], found=check["found"], story=told)
    return kept


def well_formed(checks):
    return (isinstance(checks, list) and bool(checks) and all(
        isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("passed"), bool)
        and isinstance(c.get("reason"), str) and isinstance(c.get("hint"), str) for c in checks))


# ---- the whole class --------------------------------------------------------------------------


def _reach(url):
    try:
        broker.connect(Settings(url, "", "")).close()
    except broker.BrokerUnavailable as error:
        raise BatchError(f"cannot reach the grading broker given with --amqp-url."
                         f" {str(error).split(' Start the lab')[0]}") from None


def grade_class(found, options, progress=None, route=None):
    """[Submission] for every entry found by discover(), in its order; raises BatchError.

    progress(done, total, submission) is called as each graded submission
    finishes. route: "linux" to grade every submission in a sandbox, None for
    none (--trusted).
    """
    todo = [(i, s.name, handler) for i, (s, handler) in enumerate(found) if handler is not None]
    submissions = [s for s, _ in found]
    if not todo:
        return submissions
    scratch = Path(tempfile.mkdtemp(prefix="nightjar-batch-"))
    node, graders = None, Graders()
    try:
        if options.amqp_url:
            _reach(options.amqp_url)
            broker_urls = (options.amqp_url,
                           options.management_url or default_management_url(options.amqp_url))
        else:
            node = PrivateNode(base=scratch, remove_if_orphaned=scratch).start()
            node.wait_ready()
            broker_urls = (node.url, node.management_url)
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            futures = {pool.submit(grade_one, graders, name, handler, broker_urls, options,
                                   scratch / f"submission-{i}", route): i
                       for i, name, handler in todo}
            try:
                for done, future in enumerate(as_completed(futures), 1):
                    submissions[futures[future]] = future.result()
                    if progress:
                        progress(done, len(todo), future.result())
            except BaseException:  # Ctrl+C: no more gradings, and stop the running ones
                for future in futures:
                    future.cancel()
                graders.stop_all()
                raise
        return submissions
    except NodeError as error:
        raise BatchError(f"could not start a private RabbitMQ node for grading: {error}") from None
    finally:
        graders.stop_all()
        if node is not None:
            node.stop()
        shutil.rmtree(scratch, ignore_errors=True)


# In a container of the Docker route, progress goes to stderr beside the JSON on stdout.
PROGRESS_ENV = "NIGHTJAR_GRADER_PROGRESS"


def main(options, route=None):
    """Grade the class, print and write its reports; the exit status."""
    progress_out = sys.stderr if os.environ.get(PROGRESS_ENV) == "stderr" else sys.stdout

    def progress(done, total, submission):
        print(reports.progress_line(done, total, submission), file=progress_out, flush=True)

    try:
        found = discover(options.handlers)
    except BatchError as error:
        return reports.cannot_grade(options, str(error))
    count = sum(handler is not None for _, handler in found)
    if count and not options.json:
        where = (f"grading broker {redact_url(options.amqp_url)}" if options.amqp_url
                 else "a private RabbitMQ node")
        isolation = "each in a sandbox of its own" if route else "not sandboxed"
        print(f"Grading {count} submissions in {options.handlers} ({where}, throwaway databases,"
              f" {isolation}; {options.jobs} at a time)", flush=True)
    try:
        wanted = not options.json or progress_out is sys.stderr
        submissions = grade_class(found, options, progress if wanted else None, route)
    except BatchError as error:
        return reports.cannot_grade(options, str(error))
    return report_class(options, submissions)


def report_class(options, submissions, **extra):
    """Print the class's table (or JSON, with `extra` keys) and write its report files; the exit status."""
    status = reports.exit_status(submissions)
    if options.json:
        print(reports.batch_json(submissions, **extra))
    else:
        print()
        print(reports.table(submissions))
        print()
        print(reports.summary_line(submissions))
        if not any(s.status == GRADED for s in submissions):
            count = sum(s.status not in (reports.SKIPPED, reports.REFUSED) for s in submissions)
            print("Cannot grade: " + (f"none of the {count} submissions could be graded." if count
                                      else f"no folder in {options.handlers} holds a handler.py."),
                  file=sys.stderr)
    problem = report_files.save(options, submissions)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    return status
