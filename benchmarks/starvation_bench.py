#!/usr/bin/env python3
"""Grade every handler of tests/handlers/ on a starved CPU and compare with a quiet machine (root only).

    .venv/bin/python benchmarks/starvation_bench.py [--loads 4,30,4+memory] [--routes sandboxed,trusted]

Each handler (the lab's three, the correct ones and the wrong ones) is first
graded on a quiet machine, then again at each load: a cpuset of one CPU with
that many busy processes (tests/starvekit.py; "+memory" also holds 2 GiB
written over and over), for each route. Per load and route it prints how many
correct handlers failed and wrong ones passed (both must be 0), how many were
not graded (the grading machine too busy: allowed), how many verdicts differ
from the quiet ones (must be 0), and how long the gradings took.
"""

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from graderkit import verdicts  # noqa: E402
from labkit import HANDLERS  # noqa: E402
from nightjar.harness.rabbitnode import PrivateNode  # noqa: E402
from starvekit import Starved  # noqa: E402

WRONG = ROOT / "tests" / "handlers"
CORRECT = {**{name: HANDLERS[name] for name in ("unit3",)},
           **{f"correct/{path.stem}": path for path in sorted((WRONG / "correct").glob("*.py"))}}
INCORRECT = {**{name: HANDLERS[name] for name in ("starting", "unit2")},
             **{path.stem: path for path in sorted(WRONG.glob("*.py"))}}


def quietly(command, timeout, **options):
    return subprocess.run(command, timeout=timeout, capture_output=True, text=True, **options)


def grade(handler, route, node, run):
    """(exit status, JSON report) of the grader on `handler`, started by run (quietly, or in a
    Starved corner)."""
    command = [sys.executable, "-m", "grader", "--handler", str(handler), "--json", "--skip-live",
               "--amqp-url", node.url, "--management-url", node.management_url,
               *(["--trusted"] if route == "trusted" else [])]
    result = run(command, timeout=900, cwd=ROOT)
    return result.returncode, json.loads(result.stdout)


def grade_all(handlers, route, node, run=quietly):
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(handlers, pool.map(lambda h: grade(handlers[h], route, node, run), handlers)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loads", default="4,30,4+memory")
    parser.add_argument("--routes", default="sandboxed,trusted")
    options = parser.parse_args()
    if Starved.unavailable():
        sys.exit(f"Cannot starve a CPU here: {Starved.unavailable()}")
    handlers = {**CORRECT, **INCORRECT}
    node = PrivateNode().start()
    failures = 0
    try:
        node.wait_ready()
        for route in options.routes.split(","):
            quiet = grade_all(handlers, route, node)
            for load in options.loads.split(","):
                hogs, _, memory = load.partition("+")
                start = time.monotonic()
                with Starved(int(hogs), 2048 if memory else 0) as corner:
                    starved = grade_all(handlers, route, node, corner.run)
                seconds = time.monotonic() - start
                failed = [h for h in CORRECT if starved[h][0] == 1]
                passed = [h for h in INCORRECT if starved[h][0] == 0]
                not_graded = [h for h in handlers if starved[h][0] == 2]
                differ = [h for h in handlers if starved[h][0] != 2 and (
                    starved[h][0] != quiet[h][0]
                    or verdicts(starved[h][1]["checks"]) != verdicts(quiet[h][1]["checks"]))]
                failures += len(failed) + len(passed) + len(differ)
                print(f"{route}, {hogs} hogs on one CPU{' and memory held' if memory else ''}:"
                      f" {len(handlers)} handlers in {seconds:.0f} s; correct failed {len(failed)},"
                      f" wrong passed {len(passed)}, not graded {len(not_graded)}, verdicts"
                      f" unlike the quiet ones {len(differ)}", flush=True)
                for name in failed + passed + differ + not_graded:
                    report = starved[name][1]
                    why = report.get("error") or next(
                        (c["reason"] for c in report["checks"] if not c["passed"]), "passed")
                    print(f"  {name}: {why[:200]}")
    finally:
        node.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
