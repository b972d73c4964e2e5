"""The grader's side of a submission's worker launcher (nightjar/harness/launcher.py): start it, ask it for runs.

A worker run from the launcher is a process of its own, the grader's child
(Forked: what processes.Running needs of a subprocess.Popen): the grader
made its pipes, waits for it and reads its exit status from the kernel,
signals it by its pid and reads its schedstat, as for a worker it started
itself. Before it runs anything of the submission's, the grader checks
what the kernel says of it (its parent, uids, groups, capabilities, no new
privileges, network namespace and rlimits: those of a fresh worker of its
trial) and moves it into its trial's control group. The launcher only saves
each run the imports every worker makes. Should it not answer, or answer
with a process that is not what it should be, the next run starts a new
launcher; should that fail too, start() says so with None and the worker
starts as a fresh interpreter (nightjar/sandbox/trial.py).
"""

import json
import os
import re
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

# The launcher answers at once, but its first answer waits for its imports: on a busy machine,
# seconds. A launcher that has ended is given up on at once.
ANSWER_SECONDS = 60
# How /proc/PID/limits names each rlimit (prlimit(2) of another process needs CAP_SYS_RESOURCE).
LIMITS = {"RLIMIT_CPU": "Max cpu time", "RLIMIT_FSIZE": "Max file size",
          "RLIMIT_CORE": "Max core file size", "RLIMIT_NPROC": "Max processes",
          "RLIMIT_NOFILE": "Max open files"}


class Forked:
    """A worker run the launcher forked for the grader: pid, pipes, poll(), wait(), send_signal()."""

    def __init__(self, pid, stdin, stdout, stderr):
        self.pid, self.returncode = pid, None
        self._pidfd = os.pidfd_open(pid)
        self.stdin = open(stdin, "w", encoding="utf-8", errors="replace")
        self.stdout = open(stdout, encoding="utf-8", errors="replace")
        self.stderr = open(stderr, encoding="utf-8", errors="replace")
        self._lock = threading.Lock()

    def poll(self):
        with self._lock:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # cannot be: it is this process's child
                    pid, status = self.pid, 255 << 8
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
                    os.close(self._pidfd)
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
            if left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            with self._lock:
                pidfd = self._pidfd if self.returncode is None else None
            try:
                select.select([pidfd] if pidfd is not None else [], [], [], left)  # readable once ended
            except (OSError, ValueError):
                pass  # closed meanwhile: it has ended
        return self.returncode

    def send_signal(self, sig):
        with self._lock:
            if self.returncode is None:
                signal.pidfd_send_signal(self._pidfd, sig)


class Launcher:
    """A submission's launcher process; start() runs a worker command of a trial through it."""

    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.group = sandbox.group.child("launcher")
        self.group.limit(memory=sandbox.limits.memory, processes=sandbox.limits.processes)
        self.process = self.socket = None
        self._ended = threading.Event()
        self._lock = threading.Lock()

    def _start(self, trial):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        command = ["sh", "-c", f'{self.group.join_command()} && exec "$@"', "launcher",
                   "nsenter", f"--target={self.sandbox._holder.pid}", "--mount", "--uts", "--root",
                   "--wdns=/", "--", *trial.python(), "-m", "nightjar.harness.launcher",
                   str(theirs.fileno())]
        started, self._ended = threading.Event(), threading.Event()

        def keep():
            # The workers are children of the thread that started the launcher, and the
            # effects watcher kills a worker whose parent thread ends (die_with_parent):
            # this thread lives as long as the launcher, not as the trial that needed it first.
            try:
                self.process = subprocess.Popen(
                    command, env=trial.env({"HOME": "/", "TMPDIR": "/"}),
                    pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            finally:
                started.set()
            self._ended.wait()

        threading.Thread(target=keep, name="launcher", daemon=True).start()
        started.wait()
        theirs.close()
        if self.process is None:
            raise OSError("the launcher did not start")
        ours.settimeout(0.25)
        self.socket = ours

    def start(self, trial, argv, env, workdir):
        """A Forked run of `python -S ARGV` in `trial`, in `workdir` (inside) with exactly `env`;
        None if the launcher cannot make one."""
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self.process is None:
                        self._start(trial)
                except OSError:
                    return None
                forked = self._ask(trial, argv, env, workdir)
                if forked is not None:
                    return forked
                self._stop()
            return None

    def _ask(self, trial, argv, env, workdir):
        request = json.dumps({"argv": list(argv), "env": env, "cwd": str(workdir), "uid": trial.uid,
                              "rlimits": trial.rlimits()}).encode()
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, go
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][0]]
        ours = [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][1]]
        try:
            socket.send_fds(self.socket, [request],
                            [*theirs, trial.namespaces.net_fd, trial.namespaces.ipc_fd])
            pid = int(self._answer())
        except (OSError, ValueError):
            pid = None
        for fd in theirs:
            os.close(fd)
        if not pid or not self._confined(pid, trial):
            for fd in ours:
                os.close(fd)
            return None
        stdin, stdout, stderr, go = ours
        forked = Forked(pid, stdin, stdout, stderr)
        trial.group.add(pid)  # before it runs anything of handler.py's
        os.write(go, b"g")
        os.close(go)
        return forked

    def _answer(self):
        deadline = time.monotonic() + ANSWER_SECONDS
        while time.monotonic() < deadline and self._running():
            try:
                return self.socket.recv(32)
            except TimeoutError:
                pass
        return b""

    def _running(self):
        """The launcher has not ended."""
        return self.process.poll() is None

    def _confined(self, pid, trial):
        """What the kernel says of the new process is what it says of a fresh worker of `trial`:
        the grader's child, the trial's uid and gid alone, no capability, no new privileges, the
        trial's network, its rlimits."""
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            network = os.stat(f"/proc/{pid}/ns/net").st_ino
            limits = Path(f"/proc/{pid}/limits").read_text()
        except OSError:
            return False
        fields = {key: value.split() for key, value in
                  (line.split(":", 1) for line in status.splitlines() if ":" in line)}
        ids = [str(trial.uid)] * 4
        return (fields["PPid"] == [str(os.getpid())] and fields["Uid"] == ids
                and fields["Gid"] == ids and fields["Groups"] == [] and fields["NoNewPrivs"] == ["1"]
                and all(int(fields[cap][0], 16) == 0
                        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))
                and network == os.fstat(trial.namespaces.net_fd).st_ino
                and all(re.search(rf"^{LIMITS[name]} +{soft} +{hard} ", limits, re.MULTILINE)
                        for name, (soft, hard) in trial.rlimits().items()))

    def _stop(self):
        if self.socket is not None:
            self.socket.close()
            self.socket = None
        self.group.kill_all()
        if self.process is not None:
            self.process.wait()
            self.process = None
        self._ended.set()

    def close(self):
        with self._lock:
            self._stop()
        self.group.remove()
