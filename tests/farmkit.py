"""What the farm's tests and benchmark share: grading hosts and collectors as real processes,
their output read line by line as it comes (grader/farm/)."""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pika

from grader import farm
from labkit import ROOT


class Output:
    """A process's output lines, read as they come."""

    def __init__(self, process, stream):
        self.process, self.lines, self.changed = process, [], threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream):
        for line in stream:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()

    def wait_for(self, pattern, timeout=120, after=0):
        """The first line from number `after` on matching the regular expression."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for line in self.lines[after:]:
                    if re.search(pattern, line):
                        return line
                left = deadline - time.monotonic()
                assert left > 0 and self.process.poll() is None, \
                    f"no line matching {pattern!r}:\n" + "\n".join(self.lines)
                self.changed.wait(min(left, 0.5))

    def text(self):
        return "\n".join(self.lines)


class Host:
    """`python3 -m grader serve`, grading on `grading_broker` (conftest's GradingBroker); popen
    starts it (a Starved corner's, tests/starvekit.py, say)."""

    def __init__(self, url, name, grading_broker, timeout="10", slots=1, popen=subprocess.Popen):
        self.name = name
        self.process = popen(
            [sys.executable, "-m", "grader", "serve", "--farm", url, "--slots", str(slots), "--name", name,
             "--timeout", timeout, *grading_broker.args], cwd=ROOT, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.output = Output(self.process, self.process.stdout)

    def stop(self):
        """Ctrl+C: it stops after its current job, saying so."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        assert self.process.wait(timeout=60) == 0, self.output.text()
        self.output.wait_for(r"^Stopped after \d+ jobs?\.$")


def collector(folder, url, tmp_path, *extra):
    """`python3 -m grader --handlers FOLDER --farm URL ...`, running; its batch under tmp_path."""
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", "--handlers", str(folder), "--farm", url, *extra],
        cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL, env=dict(os.environ, NIGHTJAR_LOCAL_VAR=str(tmp_path / "var")))
    return SimpleNamespace(process=process, out=Output(process, process.stdout),
                           err=Output(process, process.stderr))


def finished(run, timeout=300):
    status = run.process.wait(timeout=timeout)
    time.sleep(0.2)  # the readers' last lines
    return status, run.out.text(), run.err.text()


def jobs_waiting(url):
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        farm.declare(channel)  # as the collector will
        return channel.queue_declare(farm.JOBS, passive=True).method.message_count
    finally:
        connection.close()


def take_a_job(url, timeout=60):
    """(connection, channel, method, properties, body) of one job taken and not acked."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    farm.declare(channel)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, properties, body = channel.basic_get(farm.JOBS)
        if method is not None:
            return connection, channel, method, properties, body
        time.sleep(0.2)
    raise AssertionError("no job reached the farm")
