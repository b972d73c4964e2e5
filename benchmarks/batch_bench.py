#!/usr/bin/env python3
"""Grade the project's handlers as a class: one batch run against one grader run per handler.

    .venv/bin/python benchmarks/batch_bench.py [--jobs N] [--timeout SECONDS]

The class: the starting handler, the unit 2 and unit 3 solutions and every
wrong handler in tests/handlers/, each in a submission folder of its own.
One by one is what grading a class cost before: `python3 -m grader --handler
PATH --skip-live --json` per handler, each starting its own RabbitMQ node.
The batch is `python3 -m grader --handlers DIR --json`: one node, --jobs at a
time. Prints both wall times, submissions per minute, the speed-up (goal: at
least 3x) and whether both ways gave the same verdicts.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def the_class():
    """{submission name: handler.py} for the project's own handlers."""
    handlers = {"starting": ROOT / "ticket-desk" / "handler.py"}
    for solution in sorted(ROOT.glob("scenarios/*/solution/handler.py")):
        handlers[solution.parent.parent.name] = solution
    for wrong in sorted((ROOT / "tests" / "handlers").glob("*.py")):
        handlers[wrong.stem] = wrong
    return handlers


def grader(*args):
    result = subprocess.run([sys.executable, "-m", "grader", "--json", *args], cwd=ROOT,
                            capture_output=True, text=True)
    if result.returncode not in (0, 1):
        sys.exit(f"grading failed (status {result.returncode}): {result.stdout}{result.stderr}")
    return json.loads(result.stdout)


def verdicts(checks):
    return [(c["name"], c["passed"]) for c in checks]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--timeout", default="10", help="the grader's --timeout (default 10)")
    args = parser.parse_args()
    handlers = the_class()
    folder = Path(tempfile.mkdtemp(prefix="nightjar-batch-bench-"))
    try:
        for name, handler in handlers.items():
            (folder / name).mkdir()
            shutil.copyfile(handler, folder / name / "handler.py")

        start = time.monotonic()
        single = {name: grader("--handler", str(handler), "--skip-live", "--timeout", args.timeout)
                  for name, handler in handlers.items()}
        one_by_one = time.monotonic() - start

        start = time.monotonic()
        batch = grader("--handlers", str(folder), "--jobs", str(args.jobs),
                       "--timeout", args.timeout)
        batched = time.monotonic() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    count = len(handlers)
    same = all(verdicts(s["checks"]) == verdicts(single[s["name"]]["checks"])
               for s in batch["submissions"])
    print(f"{count} submissions, {len(os.sched_getaffinity(0))} cores, --jobs {args.jobs},"
          f" --timeout {args.timeout}")
    print(f"one by one: {one_by_one:6.1f} s  {count / one_by_one * 60:5.1f} submissions/min")
    print(f"batch:      {batched:6.1f} s  {count / batched * 60:5.1f} submissions/min")
    print(f"speed-up:   {one_by_one / batched:.1f}x (goal: at least 3x)")
    print(f"verdicts:   {'the same both ways' if same else 'DIFFERENT between the two ways'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
