#!/usr/bin/env python3
"""Measure a grading run of the passing (unit 3) handler, private broker start included.

    .venv/bin/python benchmarks/grader_bench.py [--runs N] [--handler PATH] [--kept-node]

Prints the total wall time and how it splits between starting the private
RabbitMQ node, setting up and taking down the sandbox, running checks 1-6 and
stopping the node. As root each run is made twice, sandboxed and --trusted,
one after the other. Target: a whole run well under 30 s.

--kept-node: instead, `make grade` warm, as after `make local`: a grading node
kept running (nightjar/harness/gradingnode.py), and each run a whole
`python3 -m grader --handler PATH --skip-live` process. Target: at most 4 s.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.handler import grading  # noqa: E402
from grader.options import parse_options  # noqa: E402
from nightjar import sandbox  # noqa: E402
from nightjar.harness import gradingnode  # noqa: E402

PASSING = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"
PHASES = ("broker_start", "sandbox", "checks", "broker_stop")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--handler", default=str(PASSING))
    parser.add_argument("--kept-node", action="store_true")
    args = parser.parse_args()
    if args.kept_node:
        return warm_grades(args)

    routes = ["trusted"]
    if sandbox.unavailable_reason() is None:
        sandbox.enter_private_mounts()
        routes = ["sandboxed", "trusted"]
    rows = {route: [] for route in routes}
    for run in range(1, args.runs + 1):
        for route in routes:
            options = parse_options(["--handler", args.handler, "--skip-live"])
            timings = grading.Timings()
            start = time.monotonic()
            results, error, _ = grading.grade(options, timings,
                                               sandbox_route="linux" if route == "sandboxed" else None)
            total = time.monotonic() - start
            if error:
                sys.exit(f"grading failed: {error}")
            passed = sum(r.passed for r in results)
            row = {phase: timings.marks.get(phase, 0.0) for phase in PHASES}
            row["total"] = total
            rows[route].append(row)
            print(f"run {run} {route + ':':10} total {total:5.2f} s  " + "  ".join(
                f"{phase} {row[phase]:5.2f} s" for phase in PHASES)
                + f"  ({passed}/{len(results)} checks passed)")
            for result in results:
                if not result.passed:
                    print(f"  FAIL {result.name}: {result.reason}")
    if args.runs > 1:
        for route in routes:
            print(f"median {route + ':':10} total {statistics.median(r['total'] for r in rows[route]):5.2f} s  "
                  + "  ".join(f"{phase} {statistics.median(r[phase] for r in rows[route]):5.2f} s"
                              for phase in PHASES))


def warm_grades(args):
    """Whole grader runs on a kept grading node, as `make grade` after `make local`."""
    var = Path(tempfile.mkdtemp(prefix="nightjar-bench-var-"))
    env = dict(os.environ, NIGHTJAR_LOCAL_VAR=str(var))
    try:
        if gradingnode.start(var) is None or gradingnode.find(var, wait=60) is None:
            sys.exit("the grading node did not start (is RabbitMQ installed?)")
        times = []
        for run in range(1, args.runs + 1):
            start = time.monotonic()
            result = subprocess.run([sys.executable, "-m", "grader", "--handler", args.handler,
                                     "--skip-live"], cwd=ROOT, env=env, capture_output=True,
                                    text=True)
            times.append(time.monotonic() - start)
            print(f"run {run}: {times[-1]:5.2f} s  ({result.stdout.splitlines()[-1]})")
        print(f"median: {statistics.median(times):5.2f} s (goal: at most 4 s)")
    finally:
        gradingnode.stop(var)
        shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    main()
