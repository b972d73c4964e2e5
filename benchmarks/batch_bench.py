#!/usr/bin/env python3
"""Grade the project's handlers as a class: in the sandbox against --trusted, and against one run per handler.

    .venv/bin/python benchmarks/batch_bench.py [--jobs N] [--timeout SECONDS] [--runs N]
                                               [--routes both|sandboxed|trusted] [--one-by-one]

The class: the starting handler, the unit 2 and unit 3 solutions and every
wrong handler in tests/handlers/, each in a submission folder of its own.
The batch is `python3 -m grader --handlers DIR --json`: one node, --jobs at a
time. Each run grades the class twice, sandboxed (as root) and --trusted,
one after the other (--routes: only one of them); printed: wall times, submissions per minute, the
sandbox's cost per submission (goal: within 15 %) and whether the verdicts
agree. --one-by-one also grades each handler with a grader run of its own,
each starting its own RabbitMQ node (what a class cost before batches).
"""

import argparse
import json
import os
import shutil
import statistics
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
    parser.add_argument("--runs", type=int, default=1, help="sandboxed/trusted pairs (default 1)")
    parser.add_argument("--routes", choices=["both", "sandboxed", "trusted"], default="both",
                        help="grade the class sandboxed, --trusted, or both (default)")
    parser.add_argument("--one-by-one", action="store_true")
    args = parser.parse_args()
    routes = [(route, extra) for route, extra in (("sandboxed", []), ("trusted", ["--trusted"]))
              if args.routes in ("both", route)]
    handlers = the_class()
    folder = Path(tempfile.mkdtemp(prefix="nightjar-batch-bench-"))
    times = {"sandboxed": [], "trusted": []}
    reports = {}
    try:
        for name, handler in handlers.items():
            (folder / name).mkdir()
            shutil.copyfile(handler, folder / name / "handler.py")
        for _ in range(args.runs):
            for route, extra in routes:
                start = time.monotonic()
                reports[route] = grader("--handlers", str(folder), "--jobs", str(args.jobs),
                                        "--timeout", args.timeout, *extra)
                times[route].append(time.monotonic() - start)
        if args.one_by_one:
            start = time.monotonic()
            single = {name: grader("--handler", str(handler), "--skip-live", "--timeout", args.timeout)
                      for name, handler in handlers.items()}
            one_by_one = time.monotonic() - start
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    count = len(handlers)
    median = {route: statistics.median(times[route]) for route, _ in routes}
    reports_run = [reports[route]["submissions"] for route, _ in routes]
    same = all(verdicts(s["checks"]) == verdicts(t["checks"])
               for s, t in zip(reports_run[0], reports_run[-1]))
    print(f"{count} submissions, {len(os.sched_getaffinity(0))} cores, --jobs {args.jobs},"
          f" --timeout {args.timeout}, {args.runs} run(s) each (median)")
    for route, _ in routes:
        print(f"{route + ':':10} {median[route]:6.1f} s  {count / median[route] * 60:5.1f} submissions/min"
              f"  (runs: {', '.join(f'{t:.1f}' for t in times[route])})")
    if len(routes) == 2:
        sandboxed, trusted = median["sandboxed"], median["trusted"]
        print(f"sandbox cost: {(sandboxed - trusted) / count:+.2f} s a submission,"
              f" {(sandboxed / trusted - 1) * 100:+.0f} % (goal: within 15 %)")
    if args.one_by_one:
        same = same and all(verdicts(s["checks"]) == verdicts(single[s["name"]]["checks"])
                            for s in reports_run[0])
        print(f"one by one: {one_by_one:6.1f} s  {count / one_by_one * 60:5.1f} submissions/min,"
              f" the batch {one_by_one / median[routes[0][0]]:.1f}x faster")
    print(f"verdicts:  {'the same every way' if same else 'DIFFERENT between the ways'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
