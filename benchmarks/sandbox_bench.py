#!/usr/bin/env python3
"""Measure the sandbox's set-up: per submission, per trial, per worker start (root only).

    .venv/bin/python benchmarks/sandbox_bench.py [--rounds N] [--trials N]

On a grading node of its own (as `make local` keeps), each round sets up one
Sandbox (its uid block, control group, root, vhost and relay), then --trials
trials (uid, control group, network namespace, folder) side by side, starts
one `python -S -c pass` in each trial, as a worker is started, and takes it
all down again. Prints the median of each step.

For comparison it also times bubblewrap (`bwrap`, when installed) building
the same root as nightjar/sandbox/root.py does, the one step bubblewrap
could take over (docs/explanation/sandbox.md).
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
sys.path.insert(0, str(ROOT))

from nightjar import sandbox  # noqa: E402
from nightjar.harness import gradingnode  # noqa: E402
from nightjar.sandbox import submission  # noqa: E402


def timed(function):
    start = time.perf_counter()
    value = function()
    return value, time.perf_counter() - start


def one_round(urls, trials):
    box, start = timed(lambda: sandbox.Sandbox(*urls).start())
    made, joins, closes = [], [], []
    try:
        for _ in range(trials):
            trial, seconds = timed(box.trial)
            made.append(seconds)
            command, fds = trial.command([*trial.python(), "-c", "pass"], "/")
            _, seconds = timed(lambda: subprocess.run(command, pass_fds=fds, check=True,
                                                      env=trial.env({})))
            joins.append(seconds)
        for trial in list(box._trials.values()):
            closes.append(timed(trial.close)[1])
    finally:
        _, close = timed(box.close)
    return {"sandbox start": start, "trial set-up": statistics.median(made),
            "worker start in a trial": statistics.median(joins),
            "trial take-down": statistics.median(closes), "sandbox close": close}


def bubblewrap_root():
    """bwrap building root.py's root (system read-only, /proc, /dev, /sandbox) and running true."""
    binds = []
    for folder in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = "/" + folder
        if os.path.islink(host):
            binds += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            binds += ["--ro-bind", host, host]
    prefix = str(Path(sys.base_prefix).resolve())
    if not prefix.startswith("/usr"):
        binds += ["--ro-bind", prefix, prefix]
    for name in submission.ETC:
        if os.path.exists("/etc/" + name):
            binds += ["--ro-bind", "/etc/" + name, "/etc/" + name]
    files = tempfile.mkdtemp(prefix="nightjar-bench-files-")
    try:
        command = ["bwrap", "--unshare-uts", "--unshare-ipc", "--hostname", "sandbox",
                   "--die-with-parent", *binds,
                   "--ro-bind", str(ROOT / "nightjar"), "/opt/nightjar/lib/nightjar",
                   "--proc", "/proc", "--dev", "/dev", "--bind", files, "/sandbox",
                   "--remount-ro", "/", "true"]
        return timed(lambda: subprocess.run(command, check=True))[1]
    finally:
        shutil.rmtree(files, ignore_errors=True)


def root_builder():
    """nightjar/sandbox/root.py building its root, until it says ready."""
    scratch = Path(tempfile.mkdtemp(prefix="nightjar-bench-root-"))
    try:
        (scratch / "root").mkdir()
        (scratch / "files").mkdir()
        prefix = str(Path(sys.base_prefix).resolve())
        spec = {"parent": os.getpid(), "root": str(scratch / "root"), "etc": list(submission.ETC),
                "binds": [[str(ROOT / "nightjar"), "/opt/nightjar/lib/nightjar"],
                          *([[prefix, prefix]] if not prefix.startswith("/usr") else [])],
                "files": str(scratch / "files")}
        start = time.perf_counter()
        holder = subprocess.Popen([sys.executable, "-I", "-S", str(submission.ROOT_BUILDER),
                                   json.dumps(spec)], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        ready = holder.stdout.readline().strip()
        seconds = time.perf_counter() - start
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
        if ready != "ready":
            sys.exit("root.py did not build its root")
        return seconds
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=6)
    args = parser.parse_args()
    reason = sandbox.unavailable_reason()
    if reason:
        sys.exit(f"the sandbox cannot run here: {reason}")
    sandbox.enter_private_mounts()
    var = Path(tempfile.mkdtemp(prefix="nightjar-bench-var-"))
    rows = []
    try:
        if gradingnode.start(var) is None:
            sys.exit("the grading node did not start (is RabbitMQ installed?)")
        urls = gradingnode.find(var, wait=60)
        if urls is None:
            sys.exit("the grading node did not answer")
        for _ in range(args.rounds):
            row = one_round(urls, args.trials)
            row["root built by root.py"] = root_builder()
            if shutil.which("bwrap"):
                row["root built by bubblewrap"] = bubblewrap_root()
            rows.append(row)
    finally:
        gradingnode.stop(var)
        shutil.rmtree(var, ignore_errors=True)
    rounds = f"{args.rounds} round" + ("s" if args.rounds != 1 else "")
    print(f"median of {rounds}, {args.trials} trials each (load {os.getloadavg()[0]:.1f}):")
    for step in rows[0]:
        print(f"  {step + ':':28} {1000 * statistics.median(row[step] for row in rows):7.1f} ms")


if __name__ == "__main__":
    main()
