#!/usr/bin/env python3
"""Measure the CPU one grading costs, split into the grader, its workers and the broker.

    .venv/bin/python benchmarks/cpu_bench.py [--runs N] [--handler PATH] [--trusted]

Grades the passing (unit 3) handler on a kept grading node (warm, as after
`make local`), sandboxed when this machine can, and prints for each run:
the checks' wall time; the grader's own CPU (this process, every thread);
its workers' (every process it started and waited for: the workers and the
sandbox's helpers); the broker's (the grading node's beam process, its CPU
time before and after the grading, from /proc); and their total. Then the
medians. Budget: at most 2.0 CPU-seconds a grading, the checks at most 1.0 s.

Sandboxed, it then times --starts worker runs in a trial that find no
message (the interpreter or the fork, imports, handler.py, the connection,
the queues' declare, exit): the CPU of each, forked by the submission's
launcher and, for comparison, started as a fresh interpreter. Budget: a
forked one at most 30 ms.
"""

import argparse
import os
import resource
import statistics
import shutil
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
from nightjar.harness.lab import Lab  # noqa: E402

PASSING = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"
PARTS = ("checks", "grader", "workers", "broker", "total")


def process_cpu(pid):
    """CPU-seconds (user + system) a process has used so far, from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu(who):
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def beam_pid(var):
    state = gradingnode._state(var)
    return int(Path(state["pidfile"]).read_text().strip())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--handler", default=str(PASSING))
    parser.add_argument("--trusted", action="store_true", help="grade without the sandbox")
    parser.add_argument("--starts", type=int, default=11)
    args = parser.parse_args()
    route = None
    if not args.trusted and sandbox.unavailable_reason() is None:
        sandbox.enter_private_mounts()
        route = "linux"
    var = Path(tempfile.mkdtemp(prefix="nightjar-bench-var-"))
    os.environ["NIGHTJAR_LOCAL_VAR"] = str(var)
    rows = []
    try:
        if gradingnode.start(var) is None or gradingnode.find(var, wait=60) is None:
            sys.exit("the grading node did not start (is RabbitMQ installed?)")
        beam = beam_pid(var)
        print(f"route: {'sandboxed' if route else 'trusted'}; a warm-up grading first")
        for run in range(0, args.runs + 1):
            options = parse_options(["--handler", args.handler, "--skip-live"])
            timings = grading.Timings()
            before = own_cpu(resource.RUSAGE_SELF), own_cpu(resource.RUSAGE_CHILDREN), process_cpu(beam)
            results, error, _ = grading.grade(options, timings, sandbox_route=route)
            time.sleep(0.5)  # the broker's own work after the grading (queues deleted) counts too
            after = own_cpu(resource.RUSAGE_SELF), own_cpu(resource.RUSAGE_CHILDREN), process_cpu(beam)
            if error:
                sys.exit(f"grading failed: {error}")
            grader, workers, broker = (b - a for a, b in zip(before, after))
            row = {"checks": timings.marks.get("checks", 0.0), "grader": grader, "workers": workers,
                   "broker": broker, "total": grader + workers + broker}
            passed = sum(r.passed for r in results)
            if run == 0:
                continue  # warm-up: first imports, the node's first vhost
            rows.append(row)
            print(f"run {run}: " + "  ".join(f"{part} {row[part]:5.2f} s" for part in PARTS)
                  + f"  ({passed}/{len(results)} checks passed)")
        print("median: " + "  ".join(
            f"{part} {statistics.median(r[part] for r in rows):5.2f} s" for part in PARTS))
        if route:
            url, management_url = gradingnode.find(var)
            for how in ("forked", "fresh"):
                cpu = worker_starts(url, management_url, args.handler, args.starts, how == "fresh")
                print(f"a worker run finding no message, {how}: median {statistics.median(cpu):5.1f} ms"
                      f" of CPU ({min(cpu):.1f}-{max(cpu):.1f} ms, {len(cpu)} runs)")
    finally:
        gradingnode.stop(var)
        shutil.rmtree(var, ignore_errors=True)


def worker_starts(url, management_url, handler, count, fresh):
    """CPU-milliseconds of each of `count` worker runs in one trial that find no message."""
    box = sandbox.Sandbox(url, management_url).start()
    cpu = []
    try:
        workstation = box.workstation(handler)
        with Lab(box.tenant_admin_url, workstation=workstation, trial=box.trial()) as lab:
            if fresh:
                lab.trial.launch = lambda *args: None  # what happens when the launcher fails
            for _ in range(count + 1):
                before = own_cpu(resource.RUSAGE_CHILDREN)
                worker = lab.start("worker.py")
                worker.finish()
                if worker.lines != ["No ready registrations"]:
                    sys.exit(f"the worker printed {worker.lines}, {worker.stderr!r}")
                cpu.append((own_cpu(resource.RUSAGE_CHILDREN) - before) * 1000)
    finally:
        box.close()
    return cpu[1:]  # the first waits for the launcher, and warms the node's vhost


if __name__ == "__main__":
    main()
