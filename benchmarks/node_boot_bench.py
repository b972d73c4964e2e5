#!/usr/bin/env python3
"""Boot many private RabbitMQ nodes on a starved CPU and count the boots that fail (root only).

    .venv/bin/python benchmarks/node_boot_bench.py [--boots 200] [--parallel 2] [--hogs 4]

Every boot is a PrivateNode (nightjar/harness/rabbitnode.py) started and
waited for as the grader, a class run and a grading host start theirs,
--parallel at a time, in a cpuset of one CPU with --hogs busy processes
(tests/starvekit.py): a load of --hogs on that core, the rest of the machine
usable. Prints the boots, the failures with their reasons (a failed node's
folder is kept, and named), and how many boots needed a second try.
"""

import argparse
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from nightjar.harness.rabbitnode import NodeError, PrivateNode  # noqa: E402
from starvekit import Starved  # noqa: E402

BOOT = """
import json, shutil, sys, time
sys.path.insert(0, sys.argv[1])
from nightjar.harness.rabbitnode import NodeError, PrivateNode
start = time.monotonic()
node = PrivateNode()
try:
    node.start().wait_ready()
    outcome = {"ok": True, "tries": 1 + len(getattr(node, "retried", [])),
               "retried": getattr(node, "retried", [])}
except NodeError as error:
    kept = node.dir.with_name(node.dir.name + "-failed")  # (an older checkout deletes it)
    shutil.copytree(node.dir, kept, ignore_dangling_symlinks=True)
    outcome = {"ok": False, "reason": f"{error} (copied to {kept})"}
outcome["seconds"] = time.monotonic() - start
node.stop()
print(json.dumps(outcome))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--boots", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--hogs", type=int, default=4)
    parser.add_argument("--checkout", default=str(ROOT),
                        help="the checkout whose PrivateNode boots (to compare with another)")
    options = parser.parse_args()
    if Starved.unavailable():
        sys.exit(f"Cannot starve a CPU here: {Starved.unavailable()}")
    with Starved(options.hogs) as corner:
        def boot(_):
            result = corner.run([sys.executable, "-c", BOOT, options.checkout], timeout=600)
            try:
                return json.loads(result.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                return {"ok": False, "reason": f"boot script failed: {result.stderr[-300:]}",
                        "seconds": 0}

        start = time.monotonic()
        outcomes = []
        with ThreadPoolExecutor(options.parallel) as pool:
            try:
                for outcome in pool.map(boot, range(options.boots)):
                    outcomes.append(outcome)
                    print(f"{len(outcomes)} {'ok' if outcome['ok'] else 'FAILED'}"
                          f" {outcome['seconds']:.1f} s", file=sys.stderr, flush=True)
            except KeyboardInterrupt:  # Ctrl+C: the figures of the boots done so far
                pool.shutdown(cancel_futures=True)
                options.boots = len(outcomes)
    failed = [o for o in outcomes if not o["ok"]]
    again = [o for o in outcomes if o["ok"] and o.get("tries", 1) > 1]
    seconds = [o["seconds"] for o in outcomes if o["ok"]]
    print(f"{options.boots} boots, {options.parallel} at a time, {options.hogs} hogs on one CPU,"
          f" {time.monotonic() - start:.0f} s: {len(failed)} failed, {len(again)} needed a second"
          f" try; boot median {statistics.median(seconds or [0]):.1f} s, max {max(seconds or [0]):.1f} s")
    for outcome in failed:
        print(f"  failed: {outcome['reason']}")
    for outcome in again:
        print(f"  tried again after: {outcome['retried'][0]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
