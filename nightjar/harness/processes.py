"""The Workstation programs (worker.py, desk.py) as real processes whose output is read line by line.

The grader, the unit scripts (scenarios/units/) and the tests start `python3
worker.py` in a Workstation folder, wait for a line such as `Paused POINT.`,
interrupt it, and read what it printed and (with events on) what it did.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time

from .. import events as worker_events
from ..config import REPO_ROOT


def waited_for_cpu(pid):
    """Seconds a process's threads have spent ready to run but waiting for a CPU (Linux), else 0."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as stats:
                total += int(stats.read().split()[1])
    except (OSError, ValueError, IndexError):  # gone already, or no schedstat
        pass
    return total / 1e9


TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid):
    """The fields of /proc/PID/stat after the command's name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_used(pids):
    """CPU seconds the processes used: all their threads, and the children they waited for."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / TICKS


def session_of(sid):
    """The processes of session `sid`: a worker (a session leader) and what it started."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(entry)
            if fields and fields[3] == str(sid):
                found.append(int(entry))
    return found


class OwnClock:
    """A time limit on a program's own time: what a busy machine keeps it waiting for a CPU is not counted.

    So a verdict does not depend on what else the machine runs. The program's
    own time is the time it ran or slept, not what it waited for a CPU; its
    limit is also reached once it used the limit in CPU time (with what it
    started, when members() is given: a sandbox's control group is cheap to
    list). A program that kept a CPU busy itself, using more than BUSY of it,
    is stopped at twice its limit, as it always was: crowding itself out (a
    busy loop, a fork bomb) gains it nothing. Any other program that reached
    neither limit is stopped after STARVED_AFTER times its limit (at least
    STARVED_SECONDS) and was starved by the machine: `starved`.

    (peers(): the pids of what the program waits on besides, such as a sandbox's relay to
    the broker: their waits for a CPU are not the program's either.)
    """

    STARVED_AFTER, STARVED_SECONDS = 6, 30.0
    BUSY = 0.5  # CPU seconds: several times what a whole worker run takes (about 0.1 s)

    def __init__(self, pid, limit, members=None, peers=None):
        self.pid, self.limit = pid, limit
        self.listed = members is not None
        self.members = members or (lambda: session_of(pid))
        self.peers = peers or (lambda: ())
        self.start, self.waited = time.monotonic(), self._waited()
        self.cpu = self._cpu(self.listed)
        self.starved = False

    def _waited(self):
        return sum(map(waited_for_cpu, {self.pid, *self.peers()}))

    def _cpu(self, everything):
        return cpu_used({self.pid, *self.members()} if everything else [self.pid])

    def left(self):
        """Seconds left (at most until the next bound is looked at); 0 or less once run out."""
        wall = time.monotonic() - self.start
        own = wall - (self._waited() - self.waited)
        cpu = self._cpu(self.listed) - self.cpu
        if own >= self.limit or cpu >= self.limit or (wall >= 2 * self.limit and cpu >= self.BUSY):
            return 0
        bound = max(self.STARVED_AFTER * self.limit, self.STARVED_SECONDS)
        if wall >= bound:
            # (A session is costly to list: only now, once.)
            self.starved = self._cpu(True) - self.cpu < self.BUSY
            return 0
        return min(self.limit - own, bound - wall)


class DeliveryClock:
    """A worker's time limit (OwnClock) counted afresh at each delivery it takes, its "Received"
    line, for at most `deliveries` of them: a --drain is stuck when one delivery takes longer
    than the limit, not when slow deliveries add up. (The line is the worker's own; printing
    it gains a handler at most `deliveries` times the limit.)"""

    def __init__(self, running, limit, deliveries):
        self.running, self.limit, self.deliveries = running, limit, deliveries
        self.clock = self.fresh_clock()
        self.started_afresh = 0

    def fresh_clock(self):
        return OwnClock(self.running.process.pid, self.limit, self.running.members, self.running.peers)

    def left(self):
        received = sum(line.startswith("Received ") for line in self.running.lines_so_far())
        if min(received - 1, self.deliveries - 1) > self.started_afresh:
            self.started_afresh += 1
            self.clock = self.fresh_clock()
        return self.clock.left()

    @property
    def starved(self):
        return self.clock.starved


class NeverPrinted(AssertionError):
    """A program did not print the line we waited for; the text shows what it printed."""


def program_env(settings, extra=None, isolated=False):
    """The environment of a Workstation program: the lab's settings, unbuffered output, this checkout importable.

    isolated: leave out every NIGHTJAR_* setting of the caller (a throwaway lab
    must not see the live lab's), and write no .pyc files into the folder.
    """
    env = {k: v for k, v in os.environ.items() if not (isolated and k.startswith("NIGHTJAR_"))}
    env.update(NIGHTJAR_AMQP_URL=settings.amqp_url, NIGHTJAR_DB=settings.db_path,
               NIGHTJAR_QUEUE=settings.queue, PYTHONUNBUFFERED="1")
    if isolated:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if settings.management_url:
        env["NIGHTJAR_MANAGEMENT_URL"] = settings.management_url
    # Programs import nightjar; make this checkout's copy importable even when
    # the package is not installed into the Python running them.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.update(extra or {})
    return env


def run(workdir, env, program, *args, input="", timeout=30):
    """Run worker.py or desk.py to the end; a CompletedProcess with text output."""
    return subprocess.run([sys.executable, program, *args], cwd=workdir, env=env,
                          input=input, capture_output=True, text=True, timeout=timeout)


def start(workdir, env, program, *args, events_path=None, stderr_limit=None, pass_fds=(),
          on_end=None, forked=None, members=None, peers=None):
    """Start worker.py or desk.py with pipes, to wait for its lines and interrupt it.

    `program` may also be a full command (a list), e.g. the effects watcher's
    or a sandbox's. events_path: the events file the program writes
    (NIGHTJAR_EVENTS), read at the end. stderr_limit: keep only that many
    characters of the end of stderr. on_end(running) runs once it has ended
    (a sandbox then clears up after it). forked(): the same run as a process a
    sandbox's launcher made (nightjar/sandbox/launch.py), or None to start it afresh.
    members(): the pids of the run and all it started (default: those of its session);
    peers(): those of what it waits on besides (OwnClock).
    """
    if Running.stopping:
        raise Stopping("the grader is stopping: no program starts any more")
    command = list(program) if isinstance(program, (list, tuple)) else [sys.executable, program]
    # A session of its own: what handler.py starts can be stopped with its worker.
    process = forked() if forked is not None else None
    if process is None:
        process = subprocess.Popen(
            [*command, *args], cwd=workdir, env=env, text=True, start_new_session=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=pass_fds, errors="replace")
    running = Running(process, events_path, stderr_limit, on_end, members, peers)
    if Running.stopping:  # stop_starting() came while it started: kill_all() may have missed it
        running.kill()
    return running


class Stopping(Exception):
    """Raised by start() once stop_starting() was called."""


def stop_starting():
    """From now on start() refuses: the grader is being stopped (Ctrl+C) while checks still run."""
    Running.stopping = True


def kill_all():
    """Stop every started program that is still running (the grader on Ctrl+C)."""
    with Running.lock:
        running = list(Running.alive)
    for program in running:
        program.kill()


class Running:
    """A started program whose output is read line by line.

    Reader threads collect stdout and stderr, so waiting for a line has a real
    time limit even when the program hangs without printing anything. Output
    is bounded, as a stranger's handler.py may print without end: lines are
    cut at LINE_LIMIT characters, at most BACKLOG lines wait to be read (more
    are dropped) and `lines` keeps the first LINES_KEPT. After finish():
    returncode, lines, stderr, events (nightjar/events.py), timed_out, starved
    (stopped because the machine gave it no CPU: OwnClock), and
    limits_hit (the sandbox limits the run ran into, when it ran in one).
    """

    lock = threading.Lock()
    alive = set()
    stopping = False  # set by stop_starting()
    LINE_LIMIT = 8 << 10
    BACKLOG = 4096
    LINES_KEPT = 10000

    def __init__(self, process, events_path=None, stderr_limit=None, on_end=None, members=None,
                 peers=None):
        self.process = process
        self.members, self.peers = members, peers
        self.lines = []
        self.stderr = ""
        self.events = worker_events.EventLog()
        self.timed_out = False
        self.starved = False
        self.time_limit = None
        self.paused = False  # set by interruptions.ctrl_c_at
        self.limits_hit = []
        self._events_path = events_path
        self._stderr_limit = stderr_limit
        self._on_end = on_end
        self._lines = queue.Queue(self.BACKLOG)
        self._stderr_parts = []
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        with Running.lock:
            Running.alive.add(self)
        for reader in self._readers:
            reader.start()

    @property
    def returncode(self):
        return self.process.returncode

    def _read_stdout(self):
        while line := self.process.stdout.readline(self.LINE_LIMIT):
            try:
                self._lines.put_nowait(line.rstrip("\n"))
            except queue.Full:
                pass  # read on (the program must not block), but drop it
        self._lines.put(None)

    def _keep(self, line):
        if len(self.lines) < self.LINES_KEPT:
            self.lines.append(line)

    def _read_stderr(self):
        if self._stderr_limit is None:
            self._stderr_parts.append(self.process.stderr.read())
            return
        tail = ""  # a handler may print megabytes: keep the end only
        for chunk in iter(lambda: self.process.stderr.read(65536), ""):
            tail = (tail + chunk)[-self._stderr_limit:]
        self._stderr_parts.append(tail)

    def wait_for(self, line, timeout=15, clock=None):
        """Read stdout until `line` appears as a whole line; NeverPrinted with what was seen instead.

        timeout: the program's own time (OwnClock) it may take, or `clock`, a
        limit on its whole run already counting.
        """
        clock = clock or OwnClock(self.process.pid, timeout, self.members, self.peers)
        while True:
            remaining = clock.left()
            if remaining <= 0:
                break
            try:
                got = self._lines.get(timeout=min(remaining, 0.25))
            except queue.Empty:
                continue
            if got is None:  # the program closed its output: it has ended
                self._lines.put(None)
                self.process.wait()
                for reader in self._readers:
                    reader.join()
                self.stderr = "".join(self._stderr_parts)
                break
            self._keep(got)
            if got == line:
                return
        raise NeverPrinted(f"never printed {line!r}; printed {self.lines!r}, stderr {self.stderr!r}")

    def interrupt(self, timeout=30, clock=None):
        """Ctrl+C: SIGINT, then the exit status (the rest of the output is collected)."""
        self.process.send_signal(signal.SIGINT)
        return self.finish(timeout, clock)

    def press_enter(self):
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        return self.finish()

    def finish(self, timeout=30, clock=None):
        """Wait for the end (killing it after `timeout` s of its own time, or when `clock` runs out); collect the remaining output; the exit status."""
        self.time_limit = self.time_limit or timeout
        clock = clock or OwnClock(self.process.pid, timeout, self.members, self.peers)
        while self.process.poll() is None:
            remaining = clock.left()
            if remaining <= 0:
                self.timed_out, self.starved = True, clock.starved
                break
            try:
                self.process.wait(timeout=min(remaining, 0.25))
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # also anything handler.py started, which goes with its worker
        self.process.wait()
        if self._on_end is not None:  # (a sandbox kills all the run left, pipes' holders too)
            on_end, self._on_end = self._on_end, None
            on_end(self)
        deadline = time.monotonic() + 5
        while any(reader.is_alive() for reader in self._readers) and time.monotonic() < deadline:
            self._drain()
            for reader in self._readers:
                reader.join(timeout=0.02)
        self._drain()
        self.stderr = "".join(self._stderr_parts)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                stream.close()
            except OSError:
                pass
        if self._events_path is not None:
            self.events = worker_events.EventLog(worker_events.read(self._events_path))
        with Running.lock:
            Running.alive.discard(self)
        return self.process.returncode

    def lines_so_far(self):
        """The lines printed until now (while it runs too)."""
        self._drain()
        return self.lines

    def _drain(self):
        while True:
            try:
                got = self._lines.get_nowait()
            except queue.Empty:
                return
            if got is not None:
                self._keep(got)

    def kill(self):
        """SIGKILL to the program's whole process group (it has a session of its own)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self):
        """Make sure the program is gone (used when giving up on it); the exit status."""
        if self.process.poll() is None:
            self.kill()
        return self.finish()
