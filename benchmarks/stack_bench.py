#!/usr/bin/env python3
"""Measure the container lab: `make up` cold and warm, `make grade` and `make down`.

    .venv/bin/python benchmarks/stack_bench.py [--compose v2|v1|both] [--grades N] [--rounds N] [--warm-only]
    (make bench-stack: the project's choice of Compose)

Runs a stack of its own (compose project nightjar-stack-bench-COMPOSE and its
checkout's, free ports) under each Compose asked for, and removes it
afterwards. Cold `make up`: the lab's images built with --no-cache (the base
images stay: `make base-images` builds those), then `make up` until the site
answers. Warm: `make down`, then `make up` again, --rounds times (the median
is the figure). `make grade` grades the unit 3 solution: first right after
`make up` (the grader's broker may still be starting), then --grades times
warm. --warm-only skips the cold build and keeps the lab's images (the first
`make up` then builds from the cache). The base images are the Debian ones
(tests/stackkit.py) unless NIGHTJAR_PYTHON_IMAGE and NIGHTJAR_RABBITMQ_IMAGE
name others, e.g. nightjar-base/rabbitmq:3.10-bookworm for RabbitMQ 3.x.
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
LABEL_WIDTH = 52


def timed(what, action):
    start = time.monotonic()
    result = action()
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{result.stdout}{result.stderr}")
    print(f"  {what:<{LABEL_WIDTH}} {seconds:6.1f} s", flush=True)
    return seconds


def median_line(what, figures):
    print(f"  {what + ', median':<{LABEL_WIDTH}} {statistics.median(figures):6.1f} s"
          f"  (min {min(figures):.1f}, max {max(figures):.1f})", flush=True)


def bench(name, compose, options):
    try:
        stack = Stack(f"nightjar-stack-bench-{name}", compose=compose)
    except Unavailable as reason:
        sys.exit(f"stack_bench: {reason}")
    print(f"{' '.join(compose)} (Compose {'.'.join(map(str, choice.version(compose)))}),"
          f" {stack.env['NIGHTJAR_RABBITMQ_IMAGE']}", flush=True)
    stack.remove(images=not options.warm_only)
    try:
        if options.warm_only:
            timed("make up (images from the cache)", lambda: stack.make("up"))
        else:
            build = timed("build the lab's images (--no-cache)",
                          lambda: stack.compose("--profile", "grader", "build", "--no-cache"))
            up = timed("make up after that (until the site answers)", lambda: stack.make("up"))
            print(f"  {'make up cold (the sum of the two)':<{LABEL_WIDTH}} {build + up:6.1f} s")
        downs, ups = [], []
        for n in range(options.rounds):
            downs.append(timed(f"make down ({n + 1} of {options.rounds})", lambda: stack.make("down")))
            ups.append(timed(f"make up warm ({n + 1} of {options.rounds})", lambda: stack.make("up")))
        timed("write the unit 3 handler", lambda: stack.workstation(
            "sh", "-c", "cat > handler.py", input=SOLUTION.read_text()))
        timed("make grade, the first after make up", lambda: stack.make("grade"))
        warm = [timed(f"make grade warm ({n + 1} of {options.grades})", lambda: stack.make("grade"))
                for n in range(options.grades)]
        downs.append(timed("make down (after the gradings)", lambda: stack.make("down")))
        median_line("make up warm", ups)
        median_line("make down", downs)
        median_line("make grade warm", warm)
    finally:
        stack.remove(images=not options.warm_only)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--compose", choices=[*COMPOSES, "both"],
                        help="which Compose (default: the project's choice)")
    parser.add_argument("--grades", type=int, default=3, help="warm gradings to time (default 3)")
    parser.add_argument("--rounds", type=int, default=3, help="make down / make up warm pairs (default 3)")
    parser.add_argument("--warm-only", action="store_true",
                        help="no cold build: the lab's images from the cache, and kept")
    options = parser.parse_args()
    if options.compose is None:
        runs = {"chosen": choice.choose()}
    else:
        runs = {name: COMPOSES[name] for name in (COMPOSES if options.compose == "both" else [options.compose])}
    for name, compose in runs.items():
        bench(name, compose, options)


if __name__ == "__main__":
    main()
