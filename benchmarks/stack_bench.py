#!/usr/bin/env python3
"""Measure the container lab: `make up` cold and warm, `make grade` cold and warm, `make down`.

    .venv/bin/python benchmarks/stack_bench.py [--compose v2|v1|both] [--grades N]
    (make bench-stack: the project's choice of Compose)

Runs a stack of its own (compose project nightjar-stack-bench-COMPOSE, free
ports) under each Compose asked for, and removes it afterwards, its images
included. Cold `make up`: the lab's images built with --no-cache (the base
images stay: `make base-images` builds those), then `make up` until the site
answers. Warm: `make down`, then `make up` again. `make grade` grades the
unit 3 solution: cold when the grader's broker is not running yet (the first
grading after `make up`), warm when an earlier grading left it running.
Needs a Docker engine.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nightjar import compose as choice  # noqa: E402
from stackkit import ROOT, Stack, Unavailable  # noqa: E402

SOLUTION = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"
COMPOSES = {"v2": list(choice.V2), "v1": list(choice.V1)}


def timed(what, action):
    start = time.monotonic()
    result = action()
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{result.stdout}{result.stderr}")
    print(f"  {what:<52} {seconds:6.1f} s", flush=True)
    return seconds


def bench(name, compose, grades):
    try:
        stack = Stack(f"nightjar-stack-bench-{name}", compose=compose)
    except Unavailable as reason:
        sys.exit(f"stack_bench: {reason}")
    print(f"{' '.join(compose)} (Compose {'.'.join(map(str, choice.version(compose)))})", flush=True)
    stack.remove(images=True)
    try:
        build = timed("build the lab's images (--no-cache)",
                      lambda: stack.compose("--profile", "grader", "build", "--no-cache"))
        up = timed("make up after that (until the site answers)", lambda: stack.make("up"))
        print(f"  {'make up cold (the sum of the two)':<52} {build + up:6.1f} s")
        timed("make down", lambda: stack.make("down"))
        timed("make up warm (until the site answers)", lambda: stack.make("up"))
        timed("write the unit 3 handler", lambda: stack.workstation(
            "sh", "-c", "cat > handler.py", input=SOLUTION.read_text()))
        timed("make grade cold (starts the grader's broker)", lambda: stack.make("grade"))
        warm = [timed(f"make grade warm ({n + 1} of {grades})", lambda: stack.make("grade"))
                for n in range(grades)]
        print(f"  {'make grade warm, median':<52} {statistics.median(warm):6.1f} s")
        timed("make down", lambda: stack.make("down"))
    finally:
        stack.remove(images=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose", choices=[*COMPOSES, "both"],
                        help="which Compose (default: the project's choice)")
    parser.add_argument("--grades", type=int, default=3, help="warm gradings to time (default 3)")
    options = parser.parse_args()
    if options.compose is None:
        chosen = choice.choose()
        runs = {"chosen": chosen}
    else:
        runs = {name: COMPOSES[name] for name in (COMPOSES if options.compose == "both" else [options.compose])}
    for name, compose in runs.items():
        bench(name, compose, options.grades)


if __name__ == "__main__":
    main()
