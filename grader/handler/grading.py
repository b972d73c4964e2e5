"""One handler.py graded: a grading broker, throwaway labs, the checks, its report.

    python3 -m grader [--handler PATH] [--live-db PATH | --skip-live] ...   (grader/cli.py routes here)

The broker is the --amqp-url one, else the grading node make local keeps,
else a private node started for this grading; the checks run sandboxed
when the route says so (nightjar/sandbox/), and the live results are read
read-only while the node boots.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from nightjar import broker, sandbox as sandboxing
from nightjar.config import (REPO_ROOT, WORKSTATION_ENV, Settings, local_var_folder, redact_url,
                             workstation_folder)
from nightjar.harness import gradingnode, processes
from nightjar.harness.rabbitnode import NodeError, PrivateNode
from nightjar.rabbitadmin import default_management_url

from grader import reports
from grader.options import TRUSTED_NOTE
from grader.reports import files as report_files

from . import live, runner


def default_handler():
    """The handler.py the unit scripts check: the Workstation folder's (see nightjar.config)."""
    learner = workstation_folder() / "handler.py"
    if learner.is_file() or WORKSTATION_ENV in os.environ:
        return learner
    return REPO_ROOT / "ticket-desk" / "handler.py"  # before make local made a Workstation


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
    except runner.NotGraded as error:
        return [], f"{error}; that is the grader's trouble, not handler.py's: grade it again", ""
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


def main(options, route, error=None, started=None):
    """Grade one handler on `route` (None: not sandboxed) and show its verdict; error: why it
    cannot be graded at all. The exit status."""
    started = time.monotonic() if started is None else started
    handler = Path(options.handler or default_handler())
    results, where = [], ""
    if error is None:
        results, error, where = grade(options, sandbox_route=route)
    return show(options, handler, route, results, error, where, time.monotonic() - started)


def show(options, handler, route, results, error, where, seconds):
    """Print one handler's verdict (text or JSON) and write its report files; the exit status."""
    problem = report_files.save(options, [reports.single(str(handler), results, error, seconds)])
    if problem:
        print(problem, file=sys.stderr)
        return 2
    if error:
        return reports.cannot_grade(options, error)
    passed = all(r.passed for r in results)
    if options.json:
        print(json.dumps({"passed": passed, "checks": [r.as_dict() for r in results]},
                         ensure_ascii=False))
    else:
        live_note = "live results skipped" if options.skip_live else "live results read-only"
        isolation = "handler.py sandboxed" if route else "handler.py not sandboxed"
        colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        print(reports.handler_text(results, handler, f"{where}, throwaway databases, {isolation};"
                                                     f" {live_note}", colour))
    return 0 if passed else 1
