#!/usr/bin/env python3
"""Measure the container lab: `make up` cold and warm, `make grade` and `make down`.

    .venv/bin/python benchmarks/stack_bench.py        (make bench-stack)

Runs a stack of its own (compose project nightjar-stack-bench, free ports) and
removes it afterwards, its images included. Cold: the lab's images built with
--no-cache (the base images stay: `make base-images` builds those), then
`make up` until the site answers. Warm: `make down`, then `make up` again.
`make grade` grades the unit 3 solution in containers. Needs a Docker engine.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from stackkit import ROOT, Stack, Unavailable  # noqa: E402

SOLUTION = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"


def timed(what, action):
    start = time.monotonic()
    result = action()
    seconds = time.monotonic() - start
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{result.stdout}{result.stderr}")
    print(f"{what:<46} {seconds:6.1f} s", flush=True)
    return seconds


def main():
    try:
        stack = Stack("nightjar-stack-bench")
    except Unavailable as reason:
        sys.exit(f"stack_bench: {reason}")
    stack.remove(images=True)
    try:
        build = timed("build the lab's images (--no-cache)", lambda: stack.compose("build", "--no-cache"))
        up = timed("make up after that (until the site answers)", lambda: stack.make("up"))
        print(f"{'make up cold (sum of the two)':<46} {build + up:6.1f} s")
        timed("make down", lambda: stack.make("down"))
        timed("make up warm (until the site answers)", lambda: stack.make("up"))
        timed("write the unit 3 handler", lambda: stack.workstation(
            "sh", "-c", "cat > handler.py", input=SOLUTION.read_text()))
        timed("make grade (in containers)", lambda: stack.make("grade"))
        timed("make down", lambda: stack.make("down"))
    finally:
        stack.remove(images=True)


if __name__ == "__main__":
    main()
