"""Control groups for the grader's sandbox: a group per submission, a group per trial inside it.

A group bounds the memory and the number of processes of everything in it;
on the CPU it weighs as much as a given number of busy processes, however
many it holds (a submission that forks spinning processes gets no more than
that share when others want the CPU); it can be frozen and emptied: every process in it is
killed, however it was started (a double fork and setsid included). Both
kinds of Linux's control groups work: cgroup v1 (the memory, pids, cpu and
freezer hierarchies, each mounted on its own) and cgroup v2 (one unified
hierarchy). New groups go below the group this process is in, so limits
set on that (a container's, say) still hold. Needs root.
"""

import os
import signal
import time
from pathlib import Path

V1_CONTROLLERS = ("memory", "pids", "cpu", "freezer")


class Unavailable(Exception):
    """No writable control groups here; the text says what is missing."""


def _mounts():
    """[(mount point, filesystem type, super options)] of the cgroup file systems."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        separator = fields.index("-")
        fstype = fields[separator + 1]
        if fstype in ("cgroup", "cgroup2"):
            found.append((fields[4], fstype, fields[separator + 3].split(",")))
    return found


def _own_paths():
    """{controller or '': this process's group path} from /proc/self/cgroup."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _write(path, value):
    Path(path).write_text(str(value))


class Group:
    """One control group: its folder in every hierarchy that matters."""

    def __init__(self, folders, v2):
        self.folders = folders  # {controller: Path}; v2: {"": Path}
        self.v2 = v2

    @property
    def name(self):
        return next(iter(self.folders.values())).name

    def child(self, name, exist_ok=False):
        folders = {controller: folder / name for controller, folder in self.folders.items()}
        for folder in folders.values():
            folder.mkdir(exist_ok=exist_ok)
        group = Group(folders, self.v2)
        if self.v2:
            _write(self._one() / "cgroup.subtree_control", "+memory +pids +cpu")
        return group

    def _one(self, controller="pids"):
        return self.folders["" if self.v2 else controller]

    def limit(self, memory=None, processes=None):
        """Memory in bytes (no swap on top), a number of processes."""
        if memory is not None:
            if self.v2:
                _write(self._one() / "memory.max", memory)
                _write(self._one() / "memory.swap.max", 0)
            else:
                _write(self._one("memory") / "memory.limit_in_bytes", memory)
                swap = self._one("memory") / "memory.memsw.limit_in_bytes"
                if swap.exists():
                    _write(swap, memory)
        if processes is not None:
            _write(self._one("pids") / "pids.max", processes)

    def weigh_as(self, processes):
        """Share the CPU as `processes` busy processes would, however many run in the group."""
        if self.v2:
            _write(self._one() / "cpu.weight", min(10000, 100 * processes))
        else:
            _write(self._one("cpu") / "cpu.shares", 1024 * processes)

    def join_command(self):
        """A shell command putting the shell running it ($$) into this group."""
        files = [folder / "cgroup.procs" for folder in self.folders.values()]
        return " && ".join(f"echo $$ > '{path}'" for path in files)

    def add(self, pid):
        """Move a process into this group (what it starts from then on is in it too)."""
        for folder in self.folders.values():
            _write(folder / "cgroup.procs", pid)

    def pids(self):
        """Every process in this group and the groups below it."""
        found = set()
        for root, _, files in os.walk(self._one("pids")):
            try:
                found.update(int(pid) for pid in Path(root, "cgroup.procs").read_text().split())
            except OSError:
                pass
        return found

    def _freeze(self, frozen):
        if self.v2:
            _write(self._one() / "cgroup.freeze", int(frozen))
            return
        _write(self._one("freezer") / "freezer.state", "FROZEN" if frozen else "THAWED")

    def frozen(self):
        """A context manager: nothing in the group runs inside it."""
        group = self

        class Frozen:
            def __enter__(self):
                group._freeze(True)
                deadline = time.monotonic() + 2
                while not group._is_frozen() and time.monotonic() < deadline:
                    time.sleep(0.002)

            def __exit__(self, *exc):
                group._freeze(False)

        return Frozen()

    def _is_frozen(self):
        if self.v2:
            return "frozen 1" in (self._one() / "cgroup.events").read_text()
        return (self._one("freezer") / "freezer.state").read_text().strip() == "FROZEN"

    def kill_all(self, timeout=5.0):
        """Kill every process in the group (frozen first, so none can fork meanwhile); True once empty."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            if time.monotonic() > deadline:
                return False
            if self.v2 and (self._one() / "cgroup.kill").exists():
                _write(self._one() / "cgroup.kill", 1)
            else:
                self._freeze(True)
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass
                self._freeze(False)  # a frozen process dies of SIGKILL once thawed
            time.sleep(0.005)

    def limit_counters(self):
        """{'memory': n, 'processes': n}: how often the group ran into each limit so far: a
        process killed for memory, a fork refused.

        Reaching the memory limit is not counted by itself (memory.failcnt, v2's "max"):
        the kernel then reclaims what it can, such as cached pages, and a process
        going on as before ran into nothing. How often that happens depends on what
        else the machine does, and a verdict must not.
        """
        memory = _counters(self._one("memory") / ("memory.events" if self.v2 else "memory.oom_control"))
        return {"memory": memory.get("oom_kill", 0),
                "processes": _counters(self._one("pids") / "pids.events").get("max", 0)}

    def remove(self):
        """Empty the group and the groups below it, then delete them all."""
        self.kill_all()
        for folder in self.folders.values():
            for root, dirs, _ in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
                try:
                    os.rmdir(root)
                except OSError:
                    pass


def _counters(path):
    try:
        return {key: int(value) for key, value in
                (line.split() for line in Path(path).read_text().splitlines() if line.strip())}
    except (OSError, ValueError):
        return {}


def here():
    """The Group this process is in, for making groups below it; Unavailable when none can be made."""
    if os.geteuid() != 0:
        raise Unavailable("control groups need root")
    mounts = _mounts()
    own = _own_paths()
    v1 = {}
    for point, fstype, options in mounts:
        for controller in V1_CONTROLLERS:
            if fstype == "cgroup" and controller in options:
                v1[controller] = Path(point) / own.get(controller, "/").lstrip("/")
    if set(v1) == set(V1_CONTROLLERS):
        group = Group(v1, v2=False)
    else:
        unified = [point for point, fstype, _ in mounts if fstype == "cgroup2"]
        available = (Path(unified[0]) / "cgroup.controllers").read_text().split() if unified else []
        if not unified or not {"memory", "pids", "cpu"} <= set(available):
            missing = sorted(set(V1_CONTROLLERS) - set(v1))
            raise Unavailable("no writable memory, pids, cpu and freezer control groups"
                              f" (cgroup v1 lacks {', '.join(missing)}; no cgroup v2 with"
                              " memory, pids and cpu)")
        # cgroup v2 lets only a group without processes of its own share out its controllers:
        # the sandbox's groups live in a group of their own at the top.
        group = Group({"": Path(unified[0])}, v2=True)
    for folder in group.folders.values():
        if not os.access(folder, os.W_OK):
            raise Unavailable(f"the control group folder {folder} is read-only here")
    return group


def top(name):
    """The group `name` below this process's group, made if missing (shared by all sandboxes here)."""
    base = here()
    folders = {controller: folder / name for controller, folder in base.folders.items()}
    for folder in folders.values():
        folder.mkdir(exist_ok=True)
    if base.v2:
        _write(base.folders[""] / "cgroup.subtree_control", "+memory +pids +cpu")
        _write(folders[""] / "cgroup.subtree_control", "+memory +pids +cpu")
    return Group(folders, base.v2)
