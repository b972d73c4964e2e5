"""The command line of python3 -m grader, and the time limits a grading host (serve) takes too."""

import argparse
import os
from pathlib import Path

from nightjar.config import WORKSTATION_ENV

# What a grading that needs a sandbox, and cannot have one here, tells the user to do.
TRUSTED_NOTE = "pass --trusted to grade without a sandbox (only code you trust)"


def add_time_limits(parser):
    """--timeout and --submission-timeout: the grader's, a batch's and a farm host's."""
    parser.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                        help="how long one worker run may take before it is stopped (default 10),"
                             " counted afresh at each delivery a --drain takes, and not counting"
                             " time it waited for a CPU on a busy machine (one the machine starved"
                             " leaves the handler not graded)")
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
    group = parser.add_argument_group("grading a class (see grader/class_run/batch.py)")
    group.add_argument("--handlers", type=Path, metavar="DIR",
                       help="grade every subfolder of DIR that holds a handler.py, on one broker")
    group.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)), metavar="N",
                       help="submissions graded at the same time (default: the number of cores)")
    group.add_argument("--report", metavar="FILE",
                       help="also write the class report: one HTML page with each check's pass"
                            " rate, the failures grouped by mistake and every submission's story")
    group.add_argument("--csv", metavar="FILE",
                       help="also write one CSV row per submission, one column per check")
    group.add_argument("--farm", metavar="URL",
                       help="grade the class on a grading farm: publish its jobs to this RabbitMQ"
                            " and collect the results of the hosts that serve it (grader/farm/)")
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
    elif options.report or options.csv:
        parser.error(f"--{'report' if options.report else 'csv'} is for a class: add --handlers DIR")
    if options.management_url and not options.amqp_url:
        parser.error("--management-url goes with --amqp-url")
    for path in (options.junit, options.gradescope, options.report, options.csv):
        if path and not Path(path).parent.is_dir():
            parser.error(f"no folder to write {path} in")
    return options
