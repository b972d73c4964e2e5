"""python3 -m grader [--handler PATH] [--live-db PATH | --skip-live] [--skip-live-queue]
                    [--amqp-url URL [--management-url URL]] [--json] [--junit FILE]
                    [--gradescope FILE] [--trusted | --sandbox linux|docker]
   python3 -m grader --handlers DIR [--jobs N] [--amqp-url URL [--management-url URL]] [--json]
                    [--junit FILE] [--trusted | --sandbox linux|docker]
   python3 -m grader --handlers DIR --farm URL [--batch ID] [--json] [--junit FILE]
   python3 -m grader serve --farm URL [--slots N]      (a grading host: grader/farm_host.py)

Where handler.py runs (see nightjar/sandbox/ and grader/in_docker.py):
the Linux route (as root) runs every submission in a sandbox of its own; the
Docker route runs the same inside a container, for a user with a Docker
engine but no root; --trusted runs handler.py as this user, as the learner's
own code. A class (--handlers) is always sandboxed unless --trusted; one
handler is sandboxed when the grader runs as root, and otherwise graded as
the learner's own code.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from nightjar import broker
from nightjar.config import (REPO_ROOT, WORKSTATION_ENV, Settings, local_var_folder, redact_url,
                             workstation_folder)

from nightjar import sandbox as sandboxing
from nightjar.harness import gradingnode, processes
from nightjar.harness.rabbitnode import NodeError, PrivateNode
from nightjar.sandbox.rabbitadmin import default_management_url

from . import live, reports, runner


def default_handler():
    """The handler.py the unit scripts check: the Workstation folder's (see nightjar.config)."""
    learner = workstation_folder() / "handler.py"
    if learner.is_file() or WORKSTATION_ENV in os.environ:
        return learner
    return REPO_ROOT / "ticket-desk" / "handler.py"  # before make local made a Workstation


def add_time_limits(parser):
    """--timeout and --submission-timeout: the grader's, a batch's and a farm host's."""
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long one worker run may take before it is stopped (default 10)")
    parser.add_argument("--submission-timeout", type=float, default=120.0, metavar="SECONDS",
                        help="how long one submission's grading may take, with --handlers"
                             " (default 120)")


def parse_options(argv):
    parser = argparse.ArgumentParser(
        prog="python3 -m grader",
        description="Grade handler.py with a second RabbitMQ broker and throwaway databases,"
                    " through real worker processes, real interruptions and real redelivery;"
                    " then read the live results without changing them.")
    parser.add_argument("--handler", type=Path, default=None, metavar="PATH",
                        help="the handler.py to grade (default: the Workstation folder's,"
                             f" {WORKSTATION_ENV} or workstation/ticket-desk, else"
                             " ticket-desk/handler.py)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--live-db", metavar="PATH",
                       help="the live SQLite database (default: NIGHTJAR_DB or the lab's default)")
    where.add_argument("--skip-live", action="store_true",
                       help="grade handler.py only; do not read the live results")
    parser.add_argument("--skip-live-queue", action="store_true",
                        help="read the live database but not the live queue (where the grader"
                             " cannot reach the live broker, as in the containers)")
    parser.add_argument("--amqp-url", metavar="URL",
                        help="a broker for grading (e.g. the compose grader broker) instead of"
                             " starting a private RabbitMQ node; sandboxed, its login must be an"
                             " administrator's")
    parser.add_argument("--management-url", metavar="URL",
                        help="the grading broker's management API, where the sandbox makes a vhost"
                             " per submission (default: port 15672 on the --amqp-url host)")
    isolation = parser.add_mutually_exclusive_group()
    isolation.add_argument("--trusted", action="store_true",
                           help="run handler.py without a sandbox, as this user (only for code"
                                " you trust: your own)")
    isolation.add_argument("--sandbox", choices=("linux", "docker"),
                           help="the sandbox to run handler.py in: linux (as root) or docker (a"
                                " container; for a user with a Docker engine). Default: linux as"
                                " root; a class without root uses docker when an engine answers")
    # A batch hands each submission's grader the control group it made for it.
    parser.add_argument("--sandbox-group", help=argparse.SUPPRESS)
    # ... and its own PID: a submission's grader ends with the batch (or farm host) that started it.
    parser.add_argument("--batch-parent", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_time_limits(parser)
    parser.add_argument("--junit", metavar="FILE", help="also write the verdict as JUnit XML")
    parser.add_argument("--gradescope", metavar="FILE",
                        help="also write Gradescope's results.json (one handler only)")
    group = parser.add_argument_group("grading a class (see grader/batch.py)")
    group.add_argument("--handlers", type=Path, metavar="DIR",
                       help="grade every subfolder of DIR that holds a handler.py, on one broker")
    group.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), metavar="N",
                       help="submissions graded at the same time (default: the number of cores)")
    group.add_argument("--farm", metavar="URL",
                       help="grade the class on a grading farm: publish its jobs to this RabbitMQ"
                            " and collect the results of the hosts that serve it (grader/farm.py)")
    group.add_argument("--batch", metavar="ID",
                       help="with --farm: go on with a batch stopped before (its ID was printed)")
    options = parser.parse_args(argv)
    if options.farm is not None:
        if options.handlers is None:
            parser.error("--farm grades a class: add --handlers DIR")
        if options.amqp_url or options.trusted or options.sandbox:
            parser.error("on a farm, the grading hosts choose their broker and sandbox:"
                         " leave out --amqp-url, --trusted and --sandbox")
    elif options.batch is not None:
        parser.error("--batch goes with --farm")
    if options.handlers is not None:
        if options.handler or options.live_db or options.skip_live_queue:
            parser.error("--handlers grades a class without live results:"
                         " leave out --handler, --live-db and --skip-live-queue")
        if options.gradescope:
            parser.error("--gradescope writes one submission's results; use --junit for a class")
        if options.jobs < 1:
            parser.error("--jobs needs a number of 1 or more")
    if options.management_url and not options.amqp_url:
        parser.error("--management-url goes with --amqp-url")
    for path in (options.junit, options.gradescope):
        if path and not Path(path).parent.is_dir():
            parser.error(f"no folder to write {path} in")
    return options


class CannotSandbox(Exception):
    """A sandbox is needed and none can be set up here; the text says why, in one line."""


TRUSTED_NOTE = "pass --trusted to grade without a sandbox (only code you trust)"


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


class Timings:
    def __init__(self):
        self.marks = {}

    def measure(self, name):
        timings = self

        class Span:
            def __enter__(self):
                self.start = time.monotonic()

            def __exit__(self, *exc):
                timings.marks[name] = timings.marks.get(name, 0.0) + time.monotonic() - self.start

        return Span()


def grade(options, timings=None, sandbox_route=None):
    """(results, error, broker): error is a sentence when grading could not happen at all;
    broker says in words which broker graded."""
    timings = timings or Timings()
    handler = options.handler or default_handler()
    if not Path(handler).is_file():
        return [], f"no handler.py at {handler}", ""
    live_settings = None
    if not options.skip_live:
        live_settings = Settings.from_env()
        if options.live_db:
            live_settings = Settings(live_settings.amqp_url, options.live_db, live_settings.queue)

    scratch = Path(tempfile.mkdtemp(prefix="nightjar-grader-"))
    node = sandbox = None
    try:
        with timings.measure("broker_start"):
            if options.amqp_url:
                url, where = options.amqp_url, f"grading broker {redact_url(options.amqp_url)}"
                management_url = options.management_url or default_management_url(url)
                try:
                    broker.connect(Settings(url, "", "")).close()
                except broker.BrokerUnavailable as error:
                    reason = str(error).split(" Start the lab")[0]
                    return [], f"cannot reach the grading broker given with --amqp-url. {reason}", ""
            elif kept := gradingnode.find(local_var_folder()):
                # make local's grading node: warm, apart from the live broker
                (url, management_url), where = kept, "the grading node make local keeps"
            else:
                node = PrivateNode(base=scratch, remove_if_orphaned=scratch).start()
                where = "a private RabbitMQ node"
        # While the node boots: the live results.
        live_results = []
        if live_settings is not None:
            with timings.measure("live"):
                live_results = live.check(live_settings, read_queue=not options.skip_live_queue)
        with timings.measure("broker_start"):
            if node is not None:
                node.wait_ready()
                url, management_url = node.url, node.management_url
        if sandbox_route == "linux":
            with timings.measure("sandbox"):
                group = sandboxing.existing_group(options.sandbox_group) if options.sandbox_group else None
                sandbox = sandboxing.Sandbox(url, management_url, group=group)
                sandbox.start()
        with timings.measure("checks"):
            results = runner.grade_handler(handler, url, scratch / "grading",
                                           timeout=options.timeout, delete_queues=node is None,
                                           sandbox=sandbox)
        return results + live_results, None, where
    except NodeError as error:
        return [], f"could not start a private RabbitMQ node for grading: {error}", ""
    except sandboxing.Unavailable as error:
        return [], f"{error}; {TRUSTED_NOTE}", ""
    finally:
        processes.kill_all()
        if sandbox is not None:
            with timings.measure("sandbox"):
                sandbox.close()
        with timings.measure("broker_stop"):
            if node is not None:
                node.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def report(results, handler, url_note):
    lines = [f"Grading {handler}", f"({url_note})", ""]
    for result in results:
        lines.append(f"{'PASS' if result.passed else 'FAIL'}  {result.name}")
        lines.append(f"      {result.reason}")
        if not result.passed and result.hint:
            lines.append(f"      Hint: {result.hint}")
    passed = sum(r.passed for r in results)
    lines.append("")
    lines.append(f"{passed} of {len(results)} checks passed." if passed < len(results)
                 else f"All {len(results)} checks passed.")
    return "\n".join(lines)


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        from . import farm_host  # a grading host of the farm
        return farm_host.main(argv[1:])
    options = parse_options(argv)
    # SIGTERM and SIGHUP end the grader like Ctrl+C: the private node and the
    # workers are stopped by the finally blocks.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)
        # Started in the background of a non-interactive shell, SIGINT would
        # arrive ignored; Ctrl+C must still stop the node and the workers.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if options.farm is not None:
        from . import farm_collector  # the grading hosts sandbox and grade; this side collects
        try:
            return farm_collector.main(options)
        except KeyboardInterrupt:
            return 130
    handler = Path(options.handler or default_handler())
    started = time.monotonic()
    route, error, results, where = None, None, [], ""
    try:
        route = choose_sandbox(options)
        if route == "linux":
            sandboxing.enter_private_mounts()  # now, while the grader has one thread
    except CannotSandbox as problem:
        error = str(problem)
    except sandboxing.Unavailable as problem:
        error = f"{problem}; {TRUSTED_NOTE}"
    try:
        if error is None and route == "docker":
            from . import in_docker  # the same grader and sandbox, as root in a container
            return in_docker.main(options)
        if options.handlers is not None:
            if error is not None:
                return cannot_grade(options, error)
            from . import batch  # only a class run needs it
            return batch.main(options, route)
        if error is None:
            results, error, where = grade(options, sandbox_route=route)
    except KeyboardInterrupt:
        print("Grading interrupted; the private broker and the workers were stopped.",
              file=sys.stderr)
        return 130
    problem = reports.save(options, [reports.single(str(handler), results, error,
                                                    time.monotonic() - started)])
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if error:
        return cannot_grade(options, error)
    passed = all(r.passed for r in results)
    if options.json:
        print(json.dumps({"passed": passed, "checks": [r.as_dict() for r in results]},
                         ensure_ascii=False))
    else:
        live_note = "live results skipped" if options.skip_live else "live results read-only"
        isolation = "handler.py sandboxed" if route else "handler.py not sandboxed"
        print(report(results, handler, f"{where}, throwaway databases, {isolation};"
                                       f" {live_note}"))
    return 0 if passed else 1


def cannot_grade(options, error):
    """Say in one line why nothing could be graded; exit status 2."""
    if options.json:
        key = "submissions" if options.handlers is not None else "checks"
        print(json.dumps({"passed": False, "error": error, key: []}, ensure_ascii=False))
    else:
        print(f"Cannot grade: {error}", file=sys.stderr)
    return 2
