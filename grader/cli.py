"""python3 -m grader [--handler PATH] [--live-db PATH | --skip-live] [--skip-live-queue]
                    [--amqp-url URL [--management-url URL]] [--json] [--junit FILE]
                    [--gradescope FILE] [--trusted | --sandbox linux|docker]
   python3 -m grader --handlers DIR [--jobs N] [--amqp-url URL [--management-url URL]] [--json]
                    [--junit FILE] [--trusted | --sandbox linux|docker]
   python3 -m grader --handlers DIR --farm URL [--batch ID] [--json] [--junit FILE]
   python3 -m grader serve --farm URL [--slots N]      (a grading host: grader/farm/host.py)

This module chooses the route and hands over to its entry point: one handler
(grader/handler/grading.py), a class (grader/class_run/batch.py), a farm collector
(grader/farm/collector.py), a farm host (grader/farm/host.py) or the Docker
route (grader/in_docker.py); the options are grader/options.py's.

Where handler.py runs (see nightjar/sandbox/ and grader/in_docker.py):
the Linux route (as root) runs every submission in a sandbox of its own; the
Docker route runs the same inside a container, for a user with a Docker
engine but no root; --trusted runs handler.py as this user, as the learner's
own code. A class (--handlers) is always sandboxed unless --trusted; one
handler is sandboxed when the grader runs as root, and otherwise graded as
the learner's own code.
"""

import os
import signal
import subprocess
import sys
import threading
import time

from nightjar import sandbox as sandboxing

from . import reports
from .handler import grading
from .options import TRUSTED_NOTE, parse_options


class CannotSandbox(Exception):
    """A sandbox is needed and none can be set up here; the text says why, in one line."""


def choose_sandbox(options):
    """'linux', 'docker', or None (handler.py runs unsandboxed); raises CannotSandbox."""
    if options.trusted:
        return None
    if options.sandbox == "docker":
        return "docker"
    if options.sandbox == "linux" or os.geteuid() == 0:
        reason = sandboxing.unavailable_reason()
        if reason is None:
            return "linux"
        raise CannotSandbox(f"{reason}; {TRUSTED_NOTE}")
    if options.handlers is None:
        return None  # one handler, no root: the learner's own code, as make grade runs it
    if _docker_answers():
        return "docker"
    raise CannotSandbox("a class is graded in a sandbox, which needs root (Linux's own mechanisms)"
                        f" or a Docker engine; {TRUSTED_NOTE}")


def _docker_answers():
    try:
        return subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _terminate(signum, frame):
    raise KeyboardInterrupt


def _end_like_ctrl_c():
    """SIGTERM and SIGHUP end the grader like Ctrl+C: the private node and the workers are
    stopped by the finally blocks."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)
        # Started in the background of a non-interactive shell, SIGINT would
        # arrive ignored; Ctrl+C must still stop the node and the workers.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv=None):
    """The routes, in one place: a grading host, a class on the farm, or grading here (one
    handler or a class, on this machine or in a container); the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        from .farm import host  # a grading host of the farm
        return host.main(argv[1:])
    options = parse_options(argv)
    _end_like_ctrl_c()
    if options.farm is not None:
        from .farm import collector  # the grading hosts sandbox and grade; this side collects
        try:
            return collector.main(options)
        except KeyboardInterrupt:
            return 130
    try:
        return grade_here(options)
    except KeyboardInterrupt:
        print("Grading interrupted; the private broker and the workers were stopped.",
              file=sys.stderr)
        return 130


def grade_here(options):
    """One handler or a class, in the sandbox the options and this machine allow; the exit status."""
    started = time.monotonic()
    route, error = None, None
    try:
        route = choose_sandbox(options)
        if route == "linux":
            sandboxing.enter_private_mounts()  # now, while the grader has one thread
    except CannotSandbox as problem:
        error = str(problem)
    except sandboxing.Unavailable as problem:
        error = f"{problem}; {TRUSTED_NOTE}"
    if options.handlers is not None:  # a class
        if error is not None:
            return reports.cannot_grade(options, error)
        if route == "docker":
            from . import in_docker  # the same grader and sandbox, as root in a container
            return in_docker.grade_class(options)
        from .class_run import batch  # only a class run needs it
        return batch.main(options, route)
    if route == "docker":  # one handler
        from . import in_docker
        return in_docker.grade_one(options)
    return grading.main(options, route, error, started)
