"""The sandbox a submission's code runs in while it is graded (Linux's own mechanisms, as root).

One Sandbox per graded handler.py; one Trial per throwaway lab the grader
runs it in (a check's variant). Everything a worker of a trial runs (the
learner's handler.py and whatever it starts) is:

- another user: each trial has a uid and gid of its own, from a block of
  uids that one sandbox holds at a time (a lock file per block); never the
  grader's, never another submission's or another trial's;
- limited: the trial's control group bounds memory and processes, the
  submission's bounds their sum; on the CPU it weighs as one busy process a
  trial (CPU_WEIGHT), however many it forks, so a submission spinning every
  core leaves the others (and the grader, the relay and the broker) their
  share;
  rlimits bound CPU time and file size per process, and no core files are
  written;
- in a root of its own (root.py): the system and the interpreter
  read-only, the lab's packages, a small tmpfs for the sandbox's files
  (bounded: a full disk fails one submission); not the class folder, the
  checkout or anyone's home; /proc shows a user only its own processes;
- on a network of its own (relay.py): only 127.0.0.1:5672, relayed to the
  grading broker, where it logs in as a user allowed on the submission's own
  vhost and nowhere else.

After each worker run the trial's whole control group is killed (a double
fork and setsid included) and its broker connections closed, so nothing it
started can act on its files or its queue while the grader looks. The
grader reads a trial's files only while none of its processes runs, and
only files that are what they should be (Tampered otherwise). close() kills
everything left, deletes the vhost and the user, and unmounts the tmpfs
holding every file the sandbox could write.

The grader must call enter_private_mounts() first, while it has one thread:
the tmpfs is mounted in the grader's own mount namespace, so it never shows
(or stays behind) anywhere else, even when the grader is killed.
"""

import ctypes
import fcntl
import json
import os
import secrets
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .. import db as database
from . import cgroups, rabbitadmin, relay
from .rabbitadmin import with_vhost
from .root import MS_NODEV, MS_NOSUID, mount, private_mounts

ROOT_BUILDER = Path(__file__).with_name("root.py")
# Where a block's lock file lives (root only); a block is BLOCK uids from the base.
LOCKS = Path("/run/nightjar-sandbox")
UID_BASE_ENV = "NIGHTJAR_SANDBOX_UID_BASE"
UID_BASE = 2_000_000_000
BLOCK = 16
BLOCKS = 4096
TOOLS = ("nsenter", "setpriv", "prlimit", "sh")
# What the dynamic loader and Python read from /etc.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "nsswitch.conf", "hosts")
INSIDE = Path("/sandbox")  # the trials' tmpfs, as the sandbox sees it
LIBRARY = "/opt/nightjar/lib"  # the lab's packages, as the sandbox sees them
# A submission's weight on the CPU, in busy processes: one a trial, as its workers
# would weigh outside a sandbox (so a busy machine slows it no more than it would
# them), and no more, whatever it forks.
CPU_WEIGHT = BLOCK - 1
DB_FILES = ("nightjar.db", "nightjar.db-wal", "nightjar.db-shm", "nightjar.db-journal")


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


class Unavailable(Exception):
    """The sandbox cannot be set up here; the text says why in one sentence."""


class Tampered(Exception):
    """A trial's files are not what the grader left there (a link, a pipe, another schema)."""


_in_private_mounts = False


def enter_private_mounts():
    """Give this process a mount namespace of its own (call it before any thread starts)."""
    global _in_private_mounts
    if not _in_private_mounts:
        try:
            private_mounts()
        except OSError as error:
            raise Unavailable(f"the sandbox needs a mount namespace of its own ({error.strerror})")
        _in_private_mounts = True


def new_group_name():
    return f"{os.getpid()}-{secrets.token_hex(4)}"


def existing_group(name):
    """The control group a batch made for one submission (below the sandbox's own group)."""
    return cgroups.top("nightjar-sandbox").child(name, exist_ok=True)


def unavailable_reason():
    """None when this machine can run the sandbox, else why not (one sentence)."""
    if os.geteuid() != 0:
        return "the sandbox's Linux route needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the sandbox needs {', '.join(missing)} (util-linux)"
    try:
        cgroups.here()
    except (cgroups.Unavailable, OSError) as error:
        return f"the sandbox needs control groups: {error}"
    return None


def _take_block():
    """(block number, lock fd) of a uid block no other sandbox on this machine holds."""
    LOCKS.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(LOCKS)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        raise Unavailable(f"{LOCKS} must be a folder only root can use")
    for block in range(BLOCKS):
        fd = os.open(LOCKS / f"block-{block}", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return block, fd
        except BlockingIOError:
            os.close(fd)
    raise Unavailable(f"all {BLOCKS} sandbox uid blocks are in use")


def kill_uids(first, count):
    """Kill every process whose real or effective uid is in [first, first+count): what a block left."""
    for _ in range(50):
        found = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                uids = next(line for line in (entry / "status").read_text().splitlines()
                            if line.startswith("Uid:")).split()[1:3]
            except (OSError, StopIteration):
                continue
            if any(first <= int(uid) < first + count for uid in uids):
                found.append(int(entry.name))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def expected_schema():
    """The lab database's schema as sqlite_master lists it."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in database.SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        return _schema(db)
    finally:
        db.close()


def _schema(db):
    return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                             " WHERE name NOT LIKE 'sqlite_%'").fetchall())


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
        self._block, self._block_fd = _take_block()
        self.uid_base = int(os.environ.get(UID_BASE_ENV) or UID_BASE) + BLOCK * self._block
        kill_uids(self.uid_base, BLOCK)  # what a grader killed outright may have left
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
        if not _in_private_mounts:
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
            kill_uids(self.uid_base, BLOCK)
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
            index = next(i for i in range(1, BLOCK) if i not in self._trials)
            trial = self._trials[index] = Trial(self, index)
        return trial

    def _release(self, index):
        with self._lock:
            self._trials.pop(index, None)


def umount(path):
    """Unmount `path` at once, even while something still has it open."""
    MNT_DETACH = 2
    libc = ctypes.CDLL(None, use_errno=True)
    libc.umount2(str(path).encode(), MNT_DETACH)


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
        limits = self.sandbox.limits
        net, ipc = self.namespaces.net_fd, self.namespaces.ipc_fd
        return ([
            "sh", "-c", f'{self.group.join_command()} && exec "$@"', "sandbox",
            "nsenter", f"--target={self.sandbox._holder.pid}", "--mount", "--uts", "--root",
            f"--wdns={workdir}", f"--net=/proc/self/fd/{net}", f"--ipc=/proc/self/fd/{ipc}", "--",
            "prlimit", f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            # RLIMIT_NPROC only backs the control group up: the group's own limit is
            # met first, and counted (limit_counters).
            f"--fsize={limits.file_size}", "--core=0", f"--nproc={2 * limits.processes}",
            f"--nofile={limits.open_files}", "--",
            "setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
            "--no-new-privs", "--bounding-set=-all", "--inh-caps=-all", "--",
            *argv], (net, ipc))

    def python(self):
        """The interpreter's command: this Python itself, without its site-packages (-S).

        In the sandbox a handler has the standard library, pika and the lab's
        own package (PYTHONPATH), and nothing a machine installed besides.
        """
        return [str(Path(sys.executable).resolve()), "-S"]

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
        """Raise Tampered unless the lab's database files are plain files with the lab's schema."""
        for name in DB_FILES:
            try:
                info = os.lstat(self.folder / name)
            except FileNotFoundError:
                continue
            if not stat.S_ISREG(info.st_mode):
                raise Tampered(f"handler.py replaced {name} in its lab with something that is not"
                               " a file")

    def check_schema(self, db):
        if _schema(db) != EXPECTED_SCHEMA:
            raise Tampered("handler.py changed the database's tables (its schema is not the lab's)")

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


EXPECTED_SCHEMA = expected_schema()
