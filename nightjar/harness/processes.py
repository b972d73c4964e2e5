"""Running the Workstation programs as real processes, and throwaway labs to run them in.

The scenario scripts (scenarios/labunits.py, scenarios/units/) and the tests both use this:
start `python3 worker.py` in a folder, read its output line by line, stop it
at `Paused POINT.` with Ctrl+C (SIGINT) or Enter, and look at what it left in
the database and the queue.
"""

import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from .. import broker, db as database, queueing
from ..config import Settings

ROOT = Path(__file__).resolve().parents[1]
TICKET_DESK = ROOT / "ticket-desk"
# The programs a Workstation folder needs besides the learner's handler.py.
TOOLS = ("worker.py", "desk.py", "common.py")


class NeverPrinted(AssertionError):
    """A program did not print the line we waited for; the text shows what it printed."""


def program_env(settings, extra=None):
    """os.environ with the lab's settings, unbuffered output, and this checkout importable."""
    env = dict(os.environ)
    env.update(NIGHTJAR_AMQP_URL=settings.amqp_url, NIGHTJAR_DB=settings.db_path,
               NIGHTJAR_QUEUE=settings.queue, PYTHONUNBUFFERED="1")
    if settings.management_url:
        env["NIGHTJAR_MANAGEMENT_URL"] = settings.management_url
    # Programs import nightjar; make this checkout's copy importable even when
    # the package is not installed into the Python running them.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def run(workdir, env, program, *args, input="", timeout=30):
    """Run worker.py or desk.py to the end; a CompletedProcess with text output."""
    return subprocess.run([sys.executable, program, *args], cwd=workdir, env=env,
                          input=input, capture_output=True, text=True, timeout=timeout)


def start(workdir, env, program, *args):
    """Start worker.py or desk.py with pipes, to wait for its lines and interrupt it."""
    return Running(subprocess.Popen(
        [sys.executable, program, *args], cwd=workdir, env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE))


class Running:
    """A started program whose output is read line by line.

    Reader threads collect stdout and stderr, so waiting for a line has a real
    time limit even when the program hangs without printing anything.
    """

    def __init__(self, process):
        self.process = process
        self.lines = []
        self.stderr = ""
        self._lines = queue.Queue()
        self._stderr_parts = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self):
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def _read_stderr(self):
        self._stderr_parts.append(self.process.stderr.read())

    def wait_for(self, line, timeout=15):
        """Read stdout until `line` appears as a whole line; NeverPrinted with what was seen instead."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                got = self._lines.get(timeout=remaining)
            except queue.Empty:
                break
            if got is None:  # the program closed its output: it has ended
                self._lines.put(None)
                self.process.wait()
                for reader in self._readers:
                    reader.join()
                self.stderr = "".join(self._stderr_parts)
                break
            self.lines.append(got)
            if got == line:
                return
        raise NeverPrinted(f"never printed {line!r}; printed {self.lines!r}, stderr {self.stderr!r}")

    def interrupt(self):
        """Ctrl+C: SIGINT, then the exit status (the rest of the output is collected)."""
        self.process.send_signal(signal.SIGINT)
        return self.finish()

    def press_enter(self):
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return self.finish()

    def finish(self, timeout=30):
        """Wait for the end; collect the remaining output; the exit status."""
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for reader in self._readers:
            reader.join(timeout=5)
        while True:
            try:
                got = self._lines.get_nowait()
            except queue.Empty:
                break
            if got is not None:
                self.lines.append(got)
        self.stderr = "".join(self._stderr_parts)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()
            except OSError:
                pass
        return self.process.returncode

    def stop(self):
        """Make sure the program is gone (used when giving up on it)."""
        if self.process.poll() is None:
            self.process.kill()
        return self.finish()


class ThrowawayLab:
    """A lab of its own on a given broker: a temporary database, its own queue
    names and a copy of ticket-desk/ with the handler.py under test.

    Nothing here touches the live database or the live queue. Use it as a
    context manager: the folder and the queues are removed afterwards.
    """

    def __init__(self, handler_source, amqp_url, queue_prefix="nightjar.trial"):
        self._tmp = tempfile.TemporaryDirectory(prefix="nightjar-trial-")
        tmp = Path(self._tmp.name)
        self.workdir = tmp / "ticket-desk"
        self.workdir.mkdir()
        for tool in TOOLS:
            shutil.copyfile(TICKET_DESK / tool, self.workdir / tool)
        shutil.copyfile(handler_source, self.workdir / "handler.py")
        self.settings = Settings(amqp_url=amqp_url, db_path=str(tmp / "nightjar.db"),
                                 queue=f"{queue_prefix}.{uuid.uuid4().hex[:12]}")
        self.env = program_env(self.settings)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.cleanup()

    def register(self, name):
        """Register and queue a guest through the site's code path; the ID."""
        registration_id, queued = queueing.register_at(self.settings.db_path, self.settings, name)
        if not queued:
            raise broker.BrokerUnavailable("RabbitMQ did not confirm the job")
        return registration_id

    def retry(self, registration_id):
        return self.run("desk.py", "retry", registration_id)

    def run(self, program, *args, input="", timeout=30):
        return run(self.workdir, self.env, program, *args, input=input, timeout=timeout)

    def start(self, program, *args):
        return start(self.workdir, self.env, program, *args)

    def tickets(self, registration_id):
        """Ticket numbers of one registration."""
        db = database.connect(self.settings.db_path)
        try:
            return [n for (n,) in db.execute(
                "SELECT number FROM tickets WHERE registration_id = ? ORDER BY number",
                (registration_id,))]
        finally:
            db.close()

    def completed(self, registration_id):
        db = database.connect(self.settings.db_path)
        try:
            return db.execute("SELECT 1 FROM completed WHERE id = ?",
                              (registration_id,)).fetchone() is not None
        finally:
            db.close()

    def ready(self):
        """Ready messages in the lab's queue, read without consuming."""
        return broker.queue_depths(self.settings)[0]

    def cleanup(self):
        try:
            broker.delete_queues(self.settings)
        except broker.BrokerUnavailable:
            pass
        self._tmp.cleanup()
