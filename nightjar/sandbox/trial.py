"""One trial of a sandbox: a throwaway lab's uid, control group, network and folder, and how its workers are started."""

import os
import secrets
import signal
import sys
import threading
from pathlib import Path

from . import relay, verification

LIBRARY = "/opt/nightjar/lib"  # the lab's packages, as the sandbox sees them
PRLIMIT = {"RLIMIT_CPU": "cpu", "RLIMIT_FSIZE": "fsize", "RLIMIT_CORE": "core", "RLIMIT_NPROC": "nproc",
           "RLIMIT_NOFILE": "nofile"}  # prlimit's option for each


class Trial:
    """One throwaway lab's corner of the sandbox: a uid, a control group, a network, a folder."""

    def __init__(self, sandbox, index):
        self.sandbox = sandbox
        self.index = index
        self.uid = sandbox.uid_base + index
        self.group = sandbox.group.child(f"trial-{index}")
        limits = sandbox.limits
        self.group.limit(memory=limits.memory, processes=limits.processes)
        self._counted = {}
        self._closing, self._closed = threading.Lock(), False
        self.namespaces = relay.Namespaces()
        sandbox.relay.add_trial(index, self.namespaces.listener)
        # A name no other trial can guess; the folder above it cannot be listed.
        self.folder = sandbox.files / "trials" / secrets.token_hex(8)
        self.folder.mkdir(mode=0o700)
        os.chown(self.folder, self.uid, self.uid)
        self.amqp_url = sandbox.tenant.url("127.0.0.1", relay.AMQP_PORT)

    def inside(self, path):
        return self.sandbox.inside(path)

    def give(self, path):
        """Make a file the grader created (the lab's database) the trial's own."""
        os.chown(path, self.uid, self.uid)

    def env(self, values):
        """The whole environment of a worker: these values and the bare necessities, nothing of the grader's."""
        home = str(self.inside(self.folder))
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home,
                "TMPDIR": home, "PYTHONPATH": LIBRARY, "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONUNBUFFERED": "1", **values}

    def command(self, argv, workdir):
        """(command, fds to pass): argv run in the trial, in `workdir` (a path inside)."""
        net, ipc = self.namespaces.net_fd, self.namespaces.ipc_fd
        return ([
            "sh", "-c", f'{self.group.join_command()} && exec "$@"', "sandbox",
            "nsenter", f"--target={self.sandbox._holder.pid}", "--mount", "--uts", "--root",
            f"--wdns={workdir}", f"--net=/proc/self/fd/{net}", f"--ipc=/proc/self/fd/{ipc}", "--",
            "prlimit", *(f"--{PRLIMIT[name]}={soft}:{hard}"
                         for name, (soft, hard) in self.rlimits().items()), "--",
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
            "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--",
            *argv], (net, ipc))

    def rlimits(self):
        """{resource name: [soft, hard]}: the limits of each process of the trial."""
        limits = self.sandbox.limits
        return {"RLIMIT_CPU": [limits.cpu_seconds, limits.cpu_seconds + 1],
                "RLIMIT_FSIZE": [limits.file_size] * 2, "RLIMIT_CORE": [0, 0],
                # RLIMIT_NPROC only backs the control group up: the group's own limit is
                # met first, and counted (limit_counters).
                "RLIMIT_NPROC": [2 * limits.processes] * 2,
                "RLIMIT_NOFILE": [limits.open_files] * 2}

    def python(self):
        """The interpreter's command: this Python itself, without its site-packages (-S).

        In the sandbox a handler has the standard library, pika and the lab's
        own package (PYTHONPATH), and nothing a machine installed besides.
        """
        return [str(Path(sys.executable).resolve()), "-S"]

    def relay_pids(self):
        """The relay's process: every byte of the trial's workers to the broker waits on it."""
        return [self.sandbox.relay.process.pid]

    def launch(self, argv, env, workdir):
        """A worker run of `python -S ARGV` from the submission's launcher (launch.Forked), or
        None: start it as a fresh interpreter then."""
        with self._closing:
            if self._closed:
                return None
        return self.sandbox.launcher().start(self, argv, env, workdir)

    def after_run(self, running):
        """A worker run ended: kill what it left, close its connections, note the limits it hit.

        running.limits_hit: the limits, in words (Limits.describe), the run ran into.
        """
        self.group.kill_all()
        self.sandbox.relay.close_trial(self.index)
        counted = self.group.limit_counters()
        hit = [name for name, value in counted.items() if value > self._counted.get(name, 0)]
        self._counted = counted
        if running.returncode == -signal.SIGXCPU:
            hit.append("cpu")
        if any(path.is_file() and path.stat().st_size >= self.sandbox.limits.file_size
               for path in self.folder.iterdir() if not path.is_symlink()):
            hit.append("file-size")  # Python ignores SIGXFSZ: the write fails, the file stays at the limit
        usage = os.statvfs(self.sandbox.files)
        if usage.f_bavail * usage.f_frsize < (1 << 20):
            hit.append("disk")
        running.limits_hit = [self.sandbox.limits.describe(name) for name in hit]

    def frozen(self):
        return self.group.frozen()

    def check_files(self):
        """Raise Tampered unless the lab's database files are plain files."""
        verification.check_files(self.folder)

    def close(self):
        """Kill the trial's processes and take down its network; safe to call twice, from two threads."""
        with self._closing:
            if self._closed:
                return
            self._closed = True
        self.group.remove()
        try:
            self.sandbox.relay.remove_trial(self.index, self.namespaces.listener)
        except OSError:
            pass  # the relay is gone already (the grading was interrupted)
        self.namespaces.close()
        self.sandbox._release(self.index)
