#!/usr/bin/env python3
"""What the failed checks' stories cost: one handler's checks with and without them, alternately.

    .venv/bin/python benchmarks/story_bench.py [--runs N] [--trusted]

On one private RabbitMQ node, each round grades the unit 2 solution (two
checks fail, so two stories are told) and the unit 3 solution (every
check passes: only each run's ticket read is paid) twice: as the grader
does, and with grader/handler/trial_story.py's two calls made into nothing. As root the
checks run sandboxed, as `make grade` runs them (--trusted: not). Prints
the median seconds of the checks and the difference. Budget: at most 5 %.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.handler import runner, steps, trial_story  # noqa: E402
from nightjar import sandbox as sandboxing  # noqa: E402
from nightjar.harness.rabbitnode import PrivateNode  # noqa: E402

HANDLERS = {"unit 2 (2 stories)": ROOT / "scenarios" / "unit2-ack-after-commit" / "solution" / "handler.py",
            "unit 3 (none)": ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"}
TOLD = (steps.record_run, trial_story.tell)


def stories(on):
    steps.record_run, trial_story.tell = TOLD if on else (lambda *args, **kwargs: None, lambda lab: None)


def checks_time(handler, node, sandboxed):
    with tempfile.TemporaryDirectory(prefix="nightjar-story-bench-") as scratch:
        sandbox = None
        if sandboxed:
            sandbox = sandboxing.Sandbox(node.url, node.management_url)
            sandbox.start()
        try:
            started = time.monotonic()
            results = runner.grade_handler(handler, node.url, Path(scratch), delete_queues=False,
                                           sandbox=sandbox)
            return time.monotonic() - started, results
        finally:
            if sandbox is not None:
                sandbox.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trusted", action="store_true", help="run the checks without the sandbox")
    options = parser.parse_args()
    sandboxed = not options.trusted and sandboxing.unavailable_reason() is None
    if sandboxed:
        sandboxing.enter_private_mounts()  # while this process has one thread
    node = PrivateNode().start()
    try:
        node.wait_ready()
        times = {(name, on): [] for name in HANDLERS for on in (True, False)}
        for _ in range(options.runs):
            for name, handler in HANDLERS.items():
                for on in (True, False):  # alternately, so a busier moment hurts both
                    stories(on)
                    seconds, results = checks_time(handler, node, sandboxed)
                    told = sum(r.story is not None for r in results)
                    assert told == (0 if not on else sum(not r.passed for r in results)), told
                    times[name, on].append(seconds)
    finally:
        stories(True)
        node.stop()
    print(f"Checks of one handler, median of {options.runs} runs"
          f" ({'sandboxed' if sandboxed else 'not sandboxed'}):")
    for name in HANDLERS:
        with_, without = (statistics.median(times[name, on]) for on in (True, False))
        print(f"  {name:<20} with stories {with_:.2f} s, without {without:.2f} s:"
              f" {100 * (with_ - without) / without:+.1f} %")


if __name__ == "__main__":
    main()
