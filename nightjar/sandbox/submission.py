"""The sandbox of one submission: its uid block, control group, root, tmpfs, relay and vhost.

See nightjar/sandbox/__init__.py for what a sandbox isolates; trial.py is a
trial's corner of it.
"""

import ctypes
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from nightjar import rabbitadmin
from nightjar.rabbitadmin import with_vhost

from . import cgroups, launch, relay, uids
from .machine import Unavailable, in_private_mounts, unavailable_reason
from .root import MS_NODEV, MS_NOSUID, mount
from .trial import LIBRARY, Trial

ROOT_BUILDER = Path(__file__).with_name("root.py")
# What the dynamic loader and Python read from /etc.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "hosts")
INSIDE = Path("/sandbox")  # the trials' tmpfs, as the sandbox sees it
# A submission's weight on the CPU, in busy processes: one a trial, as its workers
# would weigh outside a sandbox (so a busy machine slows it no more than it would
# them), and no more, whatever it forks.
CPU_WEIGHT = uids.BLOCK - 1


@dataclass(frozen=True)
class Limits:
    """What a submission may use. Memory and processes are per trial unless named otherwise."""

    memory: int = 256 << 20
    processes: int = 64
    cpu_seconds: int = 20          # per process
    file_size: int = 16 << 20      # per file
    disk: int = 64 << 20           # all the submission's files together
    open_files: int = 256          # per process
    submission_memory: int = 1 << 30
    submission_processes: int = 512

    def describe(self, what):
        """The limit named by `what` (memory, processes, cpu, file-size, disk), in words."""
        return {
            "memory": f"its memory limit ({self.memory >> 20} MiB a trial)",
            "processes": f"its limit of {self.processes} processes a trial",
            "cpu": f"its CPU time limit ({self.cpu_seconds} s a process)",
            "file-size": f"its file size limit ({self.file_size >> 20} MiB a file)",
            "disk": f"its disk space ({self.disk >> 20} MiB in all)",
        }[what]


def new_group_name():
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def existing_group(name):
    """The control group a batch made for one submission (below the sandbox's own group)."""
    return cgroups.top("nightjar-sandbox").child(name, exist_ok=True)


# Clears up after a sandbox whose grader died without closing it: $1 the
# grader's PID, $2 the sandbox's scratch folder, then the control group
# folders to empty and remove. (The tmpfs went with the grader's namespace.)
WATCHDOG = ('grader=$1; scratch=$2; shift 2;'
            ' while kill -0 "$grader" 2>/dev/null; do sleep 0.5; done;'
            ' for round in 1 2 3 4 5 6 7 8 9 10; do'
            ' left=$(find "$@" -name cgroup.procs -exec cat {} + 2>/dev/null);'
            ' [ -z "$left" ] && break; kill -9 $left 2>/dev/null; sleep 0.2; done;'
            ' find "$@" -depth -type d -exec rmdir {} + 2>/dev/null;'
            ' umount -l "$scratch/files" 2>/dev/null; rm -rf "$scratch"')


class Sandbox:
    """The sandbox of one submission. start() sets it up; close() takes it down.

    admin_url: the grading broker's AMQP URL with its administrator login;
    management_url: its management API. group: a control group made for this
    submission already (a batch makes them), else one of its own. Start and
    close it in a thread that lives as long as it (the root's builder dies
    with that thread).
    """

    def __init__(self, admin_url, management_url, *, limits=Limits(), group=None):
        self.admin_url = admin_url
        self.admin = rabbitadmin.Admin(management_url, admin_url)
        self.limits = limits
        self._group_given = group
        self.group = None
        self.tenant = None
        self.relay = None
        self._holder = None
        self._watchdog = None
        self._scratch = None
        self.files = None  # the tmpfs holding the Workstation copy and the trials' folders
        self._block = None
        self._trials = {}
        self._lock = threading.Lock()
        self._launcher = None  # made for the first worker run (launch.py)
        self.uid_base = None

    # ---- set up and take down --------------------------------------------------------------

    def start(self):
        reason = unavailable_reason()
        if reason:
            raise Unavailable(reason)
        try:
            self.admin.check()
        except rabbitadmin.AdminError as error:
            raise Unavailable(f"the sandbox gives each submission a vhost of its own on the"
                              f" grading broker, but {error}") from None
        self._block, self._block_fd = uids.take_block()
        self.uid_base = uids.first_uid(self._block)
        uids.kill_uids(self.uid_base, uids.BLOCK)  # what a grader killed outright may have left
        self._scratch = Path(tempfile.mkdtemp(prefix="nightjar-sandbox-"))
        if self._group_given is not None:
            self.group = self._group_given
        else:
            self.group = cgroups.top("nightjar-sandbox").child(new_group_name())
            self._watchdog = subprocess.Popen(
                ["sh", "-c", WATCHDOG, "watchdog", str(os.getpid()), str(self._scratch),
                 *map(str, self.group.folders.values())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
        self.group.limit(memory=self.limits.submission_memory,
                         processes=self.limits.submission_processes)
        self.group.weigh_as(CPU_WEIGHT)
        self._start_root()
        self.tenant = self.admin.create_tenant("nightjar-sandbox")
        parts = urlsplit(self.admin_url)
        self.relay = relay.Relay(parts.hostname or "127.0.0.1", parts.port or 5672)
        return self

    def _start_root(self):
        import pika as pika_package  # its folder is bound into the sandbox
        if not in_private_mounts():
            raise Unavailable("the grader must enter a mount namespace of its own first")
        self.files = self._scratch / "files"
        self.files.mkdir()
        mount("tmpfs", str(self.files), "tmpfs", MS_NOSUID | MS_NODEV,
              f"size={self.limits.disk},mode=755")
        binds = [[str(Path(__file__).resolve().parents[1]), f"{LIBRARY}/nightjar"],
                 [str(Path(pika_package.__file__).resolve().parent), f"{LIBRARY}/pika"]]
        prefix = str(Path(sys.base_prefix).resolve())
        if not prefix.startswith("/usr"):
            binds.append([prefix, prefix])
        (self._scratch / "root").mkdir()
        spec = {"parent": os.getpid(), "root": str(self._scratch / "root"), "binds": binds,
                "etc": list(ETC), "files": str(self.files)}
        self._holder = subprocess.Popen(
            [sys.executable, "-I", "-S", str(ROOT_BUILDER), json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self._holder.stdout.readline().strip()
        if line != "ready":
            self._holder.kill()
            error = self._holder.communicate()[1].strip().splitlines()
            raise Unavailable(f"the sandbox's root could not be built ({(error or ['no output'])[-1]})")
        (self.files / "trials").mkdir(mode=0o711)

    def close(self):
        for trial in list(self._trials.values()):
            trial.close()
        if self._launcher is not None:
            self._launcher.close()
        if self.relay is not None:
            self.relay.stop()
        if self.group is not None:
            self.group.remove() if self._group_given is None else self.group.kill_all()
        if self._holder is not None:
            self._holder.stdin.close()
            try:
                self._holder.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._holder.kill()
                self._holder.wait()
            self._holder.stdout.close()
            self._holder.stderr.close()
        if self.files is not None:
            umount(self.files)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
        if self.tenant is not None:
            self.admin.delete_tenant(self.tenant)
        if self._watchdog is not None:
            self._watchdog.kill()
            self._watchdog.wait()
        if self._block is not None:
            uids.kill_uids(self.uid_base, uids.BLOCK)
            os.close(self._block_fd)
            self._block = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    # ---- what the grader puts in it ---------------------------------------------------------

    @property
    def tenant_admin_url(self):
        """The grader's own login (administrator) on the submission's vhost."""
        return with_vhost(self.admin_url, self.tenant.vhost)

    def workstation(self, handler):
        """The Workstation copy every trial runs (read-only for them): its folder, as the grader sees it."""
        from ..harness.lab import copy_workstation
        folder = copy_workstation(self.files / "workstation", handler)
        for path in [folder, *folder.iterdir()]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        return folder

    def inside(self, path):
        """A path under the sandbox's files, as the sandbox sees it."""
        return INSIDE / Path(path).relative_to(self.files)

    def trial(self):
        with self._lock:
            index = next(i for i in range(1, uids.BLOCK) if i not in self._trials)
            trial = self._trials[index] = Trial(self, index)
        return trial

    def launcher(self):
        """The launcher its trials' workers are forked from (launch.py), made when first asked."""
        with self._lock:
            if self._launcher is None:
                self._launcher = launch.Launcher(self)
            return self._launcher

    def _release(self, index):
        with self._lock:
            self._trials.pop(index, None)


def umount(path):
    """Unmount `path` at once, even while something still has it open."""
    MNT_DETACH = 2
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(path).encode(), MNT_DETACH)
