#!/usr/bin/env python3
"""Measure a grading run of the passing (unit 3) handler, private broker start included.

    .venv/bin/python benchmarks/grader_bench.py [--runs N] [--handler PATH]

Prints the total wall time and how it splits between starting the private
RabbitMQ node, reading the live results, running checks 1-6 and stopping the
node. Target: a whole run well under 30 s.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import cli  # noqa: E402

PASSING = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"
PHASES = ("broker_start", "live", "checks", "broker_stop")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--handler", default=str(PASSING))
    args = parser.parse_args()

    rows = []
    for run in range(1, args.runs + 1):
        options = cli.parse_options(["--handler", args.handler, "--skip-live"])
        timings = cli.Timings()
        start = time.monotonic()
        results, error = cli.grade(options, timings)
        total = time.monotonic() - start
        if error:
            sys.exit(f"grading failed: {error}")
        passed = sum(r.passed for r in results)
        row = {phase: timings.marks.get(phase, 0.0) for phase in PHASES}
        row["total"] = total
        rows.append(row)
        print(f"run {run}: total {total:5.2f} s  " + "  ".join(
            f"{phase} {row[phase]:5.2f} s" for phase in PHASES if phase != "live")
            + f"  ({passed}/{len(results)} checks passed)")
    if len(rows) > 1:
        print("median:  total {:5.2f} s  ".format(statistics.median(r["total"] for r in rows))
              + "  ".join(f"{phase} {statistics.median(r[phase] for r in rows):5.2f} s"
                          for phase in PHASES if phase != "live"))


if __name__ == "__main__":
    main()
