"""A submission's worker launcher: what every worker imports, imported once; a fresh child for each run.

    python -S -m nightjar.harness.launcher FD      (started by the sandbox: nightjar/sandbox/launch.py)

A graded handler's worker starts 20-odd times, and each fresh interpreter
spent most of its CPU importing pika and the lab's runtime. The launcher
runs in the submission's sandbox root (its mount namespace; as root, in a
control group of its own), imports them once, then waits on FD, a socket
only the grader holds the other end of. Each request is a worker's command
line as `python -S` would be given it (`-m nightjar.harness.effects ... --
worker.py ARGS` or `worker.py ARGS`), its working directory, its whole
environment and the trial it runs in (its uid, rlimits), with six
descriptors: stdin, stdout, stderr, "go", and the trial's network and IPC
namespaces. For each the launcher makes one child.

The child is the grader's own child, not the launcher's (clone with
CLONE_PARENT): the grader waits for it and reads its exit status from the
kernel, as for a process it started itself. The child starts a session of
its own, takes the pipes as 0, 1 and 2, and confines itself as the
sandbox's command line confines a fresh worker (confine(): nsenter's
network and IPC, prlimit's limits, setpriv's uid, no groups, no
capabilities, no new privileges); then it answers its pid, closes every
other descriptor and waits for "go": by then the grader has checked what
the kernel says of it (uid, capabilities, namespace, limits) and moved it
into the trial's control group. Then it takes the run's environment,
imports the learner's handler.py afresh (it never was in the launcher) and
runs worker.py's main, exiting as a fresh interpreter would (SystemExit's
status; an uncaught exception's traceback from worker.py on, status 1;
its threads waited for, its atexit functions run, its files flushed),
except that it does not tear down the modules it shares with the launcher.
No trial's process can signal, trace or read the launcher (root); each
child starts from the same clean state.
"""

import array
import atexit
import ctypes
import gc
import io
import json
import os
import resource
import runpy
import signal
import socket
import sys
import threading
import traceback

# What a worker imports, imported once (pika, the runtime, the effects watcher, sqlite3, ...).
from nightjar import messages  # noqa: F401
from nightjar.harness import effects
from nightjar.runtime import worker_runtime  # noqa: F401

CLONE_PARENT = 0x00008000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
REQUEST_LIMIT = 1 << 20
EFFECTS = ["-m", "nightjar.harness.effects"]


def fork_for_parent():
    """os.fork(), but the child's parent is the launcher's parent (the grader); 0 in the child."""
    libc = ctypes.PyDLL(None, use_errno=True)  # the interpreter's lock stays held, as os.fork's does
    libc.syscall.restype = ctypes.c_long
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = libc.syscall(ctypes.c_long(SYS_CLONE[os.uname().machine]),
                       ctypes.c_long(CLONE_PARENT | signal.SIGCHLD), ctypes.c_long(0),
                       ctypes.c_long(0), ctypes.c_long(0), ctypes.c_long(0))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return pid


def main():
    control = int(sys.argv[1])  # a descriptor, no socket object: a child finds none in its memory
    last_capability = int(open("/proc/sys/kernel/cap_last_cap").read())
    # One buffer for every request, wiped after each fork: no later child finds an earlier
    # run's command line or environment in the memory it starts from.
    buffer = bytearray(REQUEST_LIMIT)
    # What is imported stays out of the collector's sight: a child's collections would
    # otherwise touch (and so copy) every page of it.
    gc.freeze()
    while True:
        size, fds = receive(control, buffer)
        if not size or len(fds) != 6:
            return 0  # the grader closed its end: the trial is over
        if fork_for_parent() == 0:
            try:
                child(json.loads(bytes(buffer[:size])), fds, control, last_capability)
            except SystemExit as end:
                exit_without_teardown(end)
        buffer[:size] = bytes(size)
        for fd in fds:
            os.close(fd)


def receive(control, buffer):
    """(bytes received into buffer, descriptors passed with them)."""
    fds = array.array("i")
    connection = socket.socket(fileno=control)
    try:
        size, ancillary, _, _ = connection.recvmsg_into([buffer], socket.CMSG_SPACE(6 * fds.itemsize))
    finally:
        connection.detach()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    return size, list(fds)


def child(request, fds, control, last_capability):
    """Become the worker run `request` asks for: a fresh session, the run's pipes, the trial."""
    os.setsid()
    stdin, stdout, stderr, go, net, ipc = fds
    for target, fd in enumerate((stdin, stdout, stderr)):
        os.dup2(fd, target)
    try:
        confine(request, net, ipc, last_capability)
    except Exception:
        os.write(control, b"0")  # not confined: the grader starts this worker afresh
        os._exit(1)
    os.write(control, str(os.getpid()).encode())  # the grader checks it, then says "go"
    os.closerange(3, go)
    os.closerange(go + 1, 2**31 - 1)  # above any limit a descriptor was opened under
    if os.read(go, 1) != b"g":  # "g": the grader has put it in the trial's control group
        os._exit(1)
    os.close(go)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    argv = request["argv"]
    sys.path[0] = os.getcwd()
    try:
        if argv[:2] == EFFECTS:
            sys.argv = [effects.__file__, *argv[2:]]
            effects.main(argv[2:])
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit:
        raise
    except BaseException as error:
        exit_as_python_would(error, argv)
    raise SystemExit(0)


def confine(request, net, ipc, last_capability):
    """What nsenter --net --ipc, prlimit and setpriv --reuid --regid --clear-groups --no-new-privs
    --bounding-set=-all --inh-caps=-all do for a fresh worker (nightjar/sandbox/trial.py)."""
    libc = ctypes.CDLL(None, use_errno=True)

    def check(result):
        if result != 0:
            raise OSError(ctypes.get_errno(), "confine")

    check(libc.setns(net, CLONE_NEWNET))
    check(libc.setns(ipc, CLONE_NEWIPC))
    for name, limit in request["rlimits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limit))
    uid = request["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    for capability in range(last_capability + 1):
        check(libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0))
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # {effective, permitted, inheritable} twice
    check(libc.capget(header, data))
    data[2] = data[5] = 0  # no inheritable capabilities
    check(libc.capset(header, data))
    os.setresuid(uid, uid, uid)  # the permitted and effective capabilities go with root
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    check(libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))  # as a fresh process of its uid is


def exit_without_teardown(end):
    """End as the interpreter ends on SystemExit, less tearing down the modules: wait for the
    run's own threads, run its atexit functions, flush every file it left open, then exit with
    end's status. Tearing down touched every page the child shares with the launcher, copying
    each: about 10 ms of CPU a run, more than the run's own work."""
    code = end.code
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # as Python does: sys.exit("message") prints the message, exit status 1
        print(code, file=sys.stderr)
        status = 1
    try:
        threading._shutdown()  # a thread that is not a daemon keeps Python running: here too
        atexit._run_exitfuncs()
    finally:
        # What the teardown would have flushed as it freed them: files the run opened and left
        # open (the collector lists only objects made after gc.freeze()), and the standard streams.
        for stream in [*(found for found in gc.get_objects() if isinstance(found, io.IOBase)),
                       sys.stdout, sys.stderr]:
            try:
                if not stream.closed:
                    stream.flush()
            except Exception:
                pass
        os._exit(status & 0xFF)


def exit_as_python_would(error, argv):
    """An uncaught exception: its traceback from the worker's own frames on, then Python's exit."""
    tb = error.__traceback__
    program = os.path.abspath(argv[argv.index("--") + 1] if argv[:2] == EFFECTS else argv[0])
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != program:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__)
    sys.stderr.flush()
    if isinstance(error, KeyboardInterrupt):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(1)


if __name__ == "__main__":
    sys.exit(main())
