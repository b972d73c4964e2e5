"""The root a sandbox's programs see: built in a mount namespace of its own, held open by this process.

    python3 root.py SPEC_JSON

Run as root by nightjar/sandbox/submission.py (one per graded submission), on
its own: it imports nothing from the project, so nothing in the checkout is
needed once it runs. It leaves the machine's mounts alone: it enters new
mount, UTS and IPC namespaces, mounts an empty tmpfs as the new root and
puts into it only what a worker needs, then chroots into it:

    /usr /bin /lib ...   the system, read-only
    <python prefix>      the interpreter, read-only, at its own path
    /opt/nightjar/lib    the lab's nightjar and pika packages, read-only
    /etc                 the few files the dynamic loader and Python read
    /proc                this machine's, showing each user only its own processes
    /dev                 null, zero, full, random, urandom
    /sandbox             the sandbox's files: the Workstation copy and the trials'
                         folders (a small tmpfs the grader mounted in its own
                         mount namespace, so it reads them at their real path)

The class folder, the project checkout, the invoking user's home and the
rest of the machine are not in it, and there is no /tmp (a trial's
TMPDIR is its own folder). Workers join it with nsenter. When this process
and every worker are gone, the namespace disappears.

It prints "ready" once the root is built, then waits for its standard input
to close (or its parent to die) and exits.
"""

import ctypes
import json
import os
import signal
import sys

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG = 1

libc = ctypes.CDLL(None, use_errno=True)


def _check(result, what):
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def mount(source, target, fstype=None, flags=0, data=None):
    _check(libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(),
                      ctypes.c_ulong(flags), data and data.encode()), f"mount {target}")


def bind(source, target, read_only=True):
    """Bind `source` (a folder or a file) at `target`, read-only unless told otherwise."""
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def tmpfs(target, size, mode):
    os.makedirs(target, exist_ok=True)
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size},mode={mode:o}")


def build(root, spec):
    """The new root at `root` (an empty folder), from the spec the sandbox wrote."""
    tmpfs(root, "1m", 0o755)
    inside = lambda path: os.path.join(root, path.lstrip("/"))  # noqa: E731
    for folder in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + folder
        if os.path.islink(host):  # merged /usr: bin -> usr/bin
            os.symlink(os.readlink(host), inside(host))
        elif os.path.isdir(host):
            bind(host, inside(host))
    for source, target in spec["binds"]:  # the interpreter, the lab's packages
        bind(source, inside(target))
    for name in spec["etc"]:
        if os.path.exists("/etc/" + name):
            bind("/etc/" + name, inside("/etc/" + name))
    os.makedirs(inside("/proc"))
    # hidepid=2: a user sees its own processes only, never the grader's.
    mount("proc", inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    tmpfs(inside("/dev"), "64k", 0o755)
    for device in ("null", "zero", "full", "random", "urandom"):
        bind("/dev/" + device, inside("/dev/" + device), read_only=False)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, inside("/dev/" + name))
    bind(spec["files"], inside("/sandbox"), read_only=False)
    # Nothing more may be created at the top of the new root.
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def private_mounts():
    """Move this process into a mount namespace of its own, where its mounts stay.

    Only a process with one thread can do this (Linux refuses otherwise).
    """
    _check(libc.unshare(CLONE_NEWNS), "unshare")
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def main():
    spec = json.loads(sys.argv[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the grader, whatever stops it
    if os.getppid() != spec["parent"]:
        return 1
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC), "unshare")
    # Mounts made from here on stay in this namespace.
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    build(spec["root"], spec)
    os.chroot(spec["root"])
    os.chdir("/")
    libc.sethostname(b"sandbox", 7)
    print("ready", flush=True)
    sys.stdin.read()  # until the sandbox closes it
    return 0


if __name__ == "__main__":
    sys.exit(main())
