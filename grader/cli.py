"""python3 -m grader [--handler PATH] [--live-db PATH | --skip-live] [--skip-live-queue]
                    [--amqp-url URL] [--json] [--junit FILE] [--gradescope FILE]
   python3 -m grader --handlers DIR [--jobs N] [--amqp-url URL] [--json] [--junit FILE]"""

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from nightjar import broker
from nightjar.config import (REPO_ROOT, WORKSTATION_ENV, Settings, redact_url,
                             workstation_folder)

from nightjar.harness import processes
from nightjar.harness.rabbitnode import NodeError, PrivateNode

from . import live, reports, runner


def default_handler():
    """The handler.py the unit scripts check: the Workstation folder's (see nightjar.config)."""
    learner = workstation_folder() / "handler.py"
    if learner.is_file() or WORKSTATION_ENV in os.environ:
        return learner
    return REPO_ROOT / "ticket-desk" / "handler.py"  # before make local made a Workstation


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
                             " starting a private RabbitMQ node")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long one worker run may take before it is stopped (default 10)")
    parser.add_argument("--junit", metavar="FILE", help="also write the verdict as JUnit XML")
    parser.add_argument("--gradescope", metavar="FILE",
                        help="also write Gradescope's results.json (one handler only)")
    group = parser.add_argument_group("grading a class (see grader/batch.py)")
    group.add_argument("--handlers", type=Path, metavar="DIR",
                       help="grade every subfolder of DIR that holds a handler.py, on one broker")
    group.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), metavar="N",
                       help="submissions graded at the same time (default: the number of cores)")
    group.add_argument("--submission-timeout", type=float, default=120.0, metavar="SECONDS",
                       help="how long one submission's grading may take (default 120)")
    options = parser.parse_args(argv)
    if options.handlers is not None:
        if options.handler or options.live_db or options.skip_live_queue:
            parser.error("--handlers grades a class without live results:"
                         " leave out --handler, --live-db and --skip-live-queue")
        if options.gradescope:
            parser.error("--gradescope writes one submission's results; use --junit for a class")
        if options.jobs < 1:
            parser.error("--jobs needs a number of 1 or more")
    for path in (options.junit, options.gradescope):
        if path and not Path(path).parent.is_dir():
            parser.error(f"no folder to write {path} in")
    return options


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


def grade(options, timings=None):
    """(results, error): error is a sentence when grading could not happen at all."""
    timings = timings or Timings()
    handler = options.handler or default_handler()
    if not Path(handler).is_file():
        return [], f"no handler.py at {handler}"
    live_settings = None
    if not options.skip_live:
        live_settings = Settings.from_env()
        if options.live_db:
            live_settings = Settings(live_settings.amqp_url, options.live_db, live_settings.queue)

    scratch = Path(tempfile.mkdtemp(prefix="nightjar-grader-"))
    node = None
    try:
        with timings.measure("broker_start"):
            if options.amqp_url:
                url = options.amqp_url
                try:
                    broker.connect(Settings(url, "", "")).close()
                except broker.BrokerUnavailable as error:
                    reason = str(error).split(" Start the lab")[0]
                    return [], f"cannot reach the grading broker given with --amqp-url. {reason}"
            else:
                node = PrivateNode(base=scratch, remove_if_orphaned=scratch).start()
        # While the node boots: the live results.
        live_results = []
        if live_settings is not None:
            with timings.measure("live"):
                live_results = live.check(live_settings, read_queue=not options.skip_live_queue)
        with timings.measure("broker_start"):
            if node is not None:
                node.wait_ready()
                url = node.url
        with timings.measure("checks"):
            results = runner.grade_handler(handler, url, scratch / "grading",
                                           timeout=options.timeout, delete_queues=node is None)
        return results + live_results, None
    except NodeError as error:
        return [], f"could not start a private RabbitMQ node for grading: {error}"
    finally:
        processes.kill_all()
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
    options = parse_options(sys.argv[1:] if argv is None else argv)
    # SIGTERM and SIGHUP end the grader like Ctrl+C: the private node and the
    # workers are stopped by the finally blocks.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)
        # Started in the background of a non-interactive shell, SIGINT would
        # arrive ignored; Ctrl+C must still stop the node and the workers.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    handler = Path(options.handler or default_handler())
    started = time.monotonic()
    try:
        if options.handlers is not None:
            from . import batch  # only a class run needs it
            return batch.main(options)
        results, error = grade(options)
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
        if options.json:
            print(json.dumps({"passed": False, "error": error, "checks": []}))
        else:
            print(f"Cannot grade: {error}", file=sys.stderr)
        return 2
    passed = all(r.passed for r in results)
    if options.json:
        print(json.dumps({"passed": passed, "checks": [r.as_dict() for r in results]},
                         ensure_ascii=False))
    else:
        broker_note = (f"grading broker {redact_url(options.amqp_url)}" if options.amqp_url
                       else "a private RabbitMQ node")
        live_note = "live results skipped" if options.skip_live else "live results read-only"
        print(report(results, handler, f"{broker_note}, throwaway databases; {live_note}"))
    return 0 if passed else 1
