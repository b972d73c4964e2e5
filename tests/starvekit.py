"""A starved corner of the machine: one CPU, busy processes on it, and the programs under test run there.

A cgroup v1 cpuset of one CPU holds `hogs` busy processes and whatever
run() starts (and all that starts in turn): it is starved as the whole
machine would be at a load of `hogs` a core (a hog a session, as other
people's programs are), while the machine's other CPUs stay usable for
everyone else. memory=N also keeps N MiB written and
rewritten there, so the kernel has little memory to spare. Needs root and a
cpuset hierarchy (Starved.unavailable() says why not).
"""

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

CPUSET = Path("/sys/fs/cgroup/cpuset")
HOG = "while True: pass"
# Writes its memory over and over, so none of it can be reclaimed or swapped for long.
MEMORY_HOG = ("import sys\nheld = [bytearray(1 << 20) for _ in range(int(sys.argv[1]))]\n"
              "while True:\n    for block in held: block[::4096] = b'x' * len(block[::4096])")


class Starved:
    def __init__(self, hogs, memory=0):
        self.hogs, self.memory = hogs, memory
        self.folder = CPUSET / f"nightjar-starved-{uuid.uuid4().hex[:8]}"
        self.started = []

    @staticmethod
    def unavailable():
        """Why no starved corner can be made here, or None."""
        if os.geteuid() != 0:
            return "a cpuset needs root"
        if not (CPUSET / "cpuset.cpus").exists():
            return "no cgroup v1 cpuset hierarchy"
        if len(os.sched_getaffinity(0)) < 2:
            return "one CPU only: starving it would starve the whole machine"
        return None

    def __enter__(self):
        self.folder.mkdir()
        (self.folder / "cpuset.cpus").write_text(str(max(os.sched_getaffinity(0))))
        (self.folder / "cpuset.mems").write_text((CPUSET / "cpuset.mems").read_text().strip())
        try:
            # Each in a session of its own: the scheduler shares a CPU between sessions first
            # (autogroup), so hogs of one session would weigh as one.
            for _ in range(self.hogs):
                self.started.append(self.popen([sys.executable, "-c", HOG], start_new_session=True))
            if self.memory:
                self.started.append(self.popen([sys.executable, "-c", MEMORY_HOG, str(self.memory)],
                                               start_new_session=True))
        except BaseException:
            self.__exit__()
            raise
        return self

    def _join(self):
        (self.folder / "cgroup.procs").write_text(str(os.getpid()))

    def popen(self, command, **options):
        """A process started in the starved corner (a subprocess.Popen)."""
        return subprocess.Popen(command, preexec_fn=self._join, **options)

    def run(self, command, timeout, **options):
        """subprocess.run in the starved corner."""
        with self.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        **options) as process:
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                raise
            return subprocess.CompletedProcess(command, process.returncode, out, err)

    def __exit__(self, *exc):
        for process in self.started:
            process.send_signal(signal.SIGKILL)
            process.wait()
        # Anything still in the group (a grader's leftovers) goes back to the machine's set first.
        for pid in (self.folder / "cgroup.procs").read_text().split():
            try:
                (CPUSET / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        self.folder.rmdir()
