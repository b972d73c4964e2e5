#!/usr/bin/env python3
"""The class report (--report) and CSV (--csv) for 100 submissions: their size and the time to write them.

    .venv/bin/python benchmarks/report_bench.py [--submissions N] [--runs N] [--handlers DIR]

Grades the handlers in tests/handlers/ (or the *.py files of DIR) once as a class (a private node,
sandboxed as root), then makes a class of N submissions (default 100) by
repeating their real verdicts and stories under new names, and times
writing both files. Prints the sizes and the median times.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.reports import class_report  # noqa: E402
from grader.reports import Submission  # noqa: E402


def graded_class(folder, handlers):
    for handler in sorted(handlers.glob("*.py")):
        (folder / handler.stem).mkdir()
        shutil.copyfile(handler, folder / handler.stem / "handler.py")
    result = subprocess.run([sys.executable, "-m", "grader", "--handlers", str(folder), "--json",
                             "--timeout", "5"], cwd=ROOT, capture_output=True, text=True)
    report = json.loads(result.stdout)
    return [Submission(s["name"], s["status"], s["checks"], s.get("note", ""))
            for s in report["submissions"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submissions", type=int, default=100)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--handlers", type=Path, default=ROOT / "tests" / "handlers",
                        help="the handlers to grade (*.py in it)")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nightjar-report-bench-") as tmp:
        folder = Path(tmp) / "class"
        folder.mkdir()
        started = time.monotonic()
        real = graded_class(folder, options.handlers)
        grading = time.monotonic() - started
    subs = [replace(real[i % len(real)], name=f"learner-{i:03d} ({real[i % len(real)].name})")
            for i in range(options.submissions)]
    times, sizes = {"report": [], "csv": []}, {}
    for _ in range(options.runs):
        for key, render in (("report", lambda: class_report.html_report(subs, "class")),
                            ("csv", lambda: class_report.csv_text(subs))):
            started = time.monotonic()
            text = render()
            times[key].append(time.monotonic() - started)
            sizes[key] = len(text.encode("utf-8"))
    failed = sum(not c["passed"] for s in subs for c in s.checks)
    print(f"{len(real)} real submissions graded in {grading:.1f} s, repeated to {len(subs)}"
          f" ({failed} failed checks, each with its story):")
    for key in ("report", "csv"):
        print(f"  --{key}: {sizes[key] / 1024:.0f} KiB, written in"
              f" {1000 * statistics.median(times[key]):.1f} ms (median of {options.runs})")


if __name__ == "__main__":
    main()
