#!/usr/bin/env python3
"""Measure the grading farm (grader/farm.py) on this machine, as root (its hosts grade in the sandbox).

1. Coordination: the same class graded by a local batch (--jobs 2) and by a
   farm of one host with two slots, on the same grading node: what the farm
   adds a submission.
2. Throughput with 1, 2 and 3 hosts of one slot each, all on this machine:
   with 2 cores the gradings compete for the CPU, so more hosts here stop
   helping once the cores are busy (on separate machines each adds its own).
3. Failover: a host SIGKILLed mid-grade; the time until another host takes
   its job again, and until that job's result is stored.

Then, on paper from those figures: 1,000 and 10,000 submissions on 10 and 50
hosts like this machine (two slots each).

Uses a private farm broker and a private grading node; removes them afterwards.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import GradingBroker  # noqa: E402
from farmkit import Host, collector, finished  # noqa: E402
from labkit import HANDLERS  # noqa: E402
from nightjar.harness.rabbitnode import PrivateNode  # noqa: E402
from nightjar.sandbox.rabbitadmin import Admin  # noqa: E402

WRONG = ROOT / "tests" / "handlers"
CLASS = {"unit3": HANDLERS["unit3"], "unit2": HANDLERS["unit2"], "starting": HANDLERS["starting"],
         **{name: WRONG / f"{name}.py" for name in (
             "never_acks", "syntax_error", "dedupe_by_name", "skip_redelivered", "completed_first")}}


def make_class(folder):
    for name, handler in CLASS.items():
        (folder / name).mkdir(parents=True)
        shutil.copyfile(handler, folder / name / "handler.py")
    return folder


def local_batch(folder, grading):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "grader", "--handlers", str(folder), "--json",
                             "--jobs", "2", *grading.args], cwd=ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - started
    return seconds, json.loads(result.stdout)


def farm_run(folder, url, grading, tmp, host_slots):
    """Seconds for the collector to get the whole class from hosts with these slots; the report."""
    hosts = []
    for number, slots in enumerate(host_slots, 1):
        host = Host(url, f"host-{number}", grading, slots=slots)
        host.output.wait_for(r"^Connected to the farm broker")
        hosts.append(host)
    try:
        started = time.monotonic()
        status, out, err = finished(collector(folder, url, tmp, "--json"), timeout=1200)
        seconds = time.monotonic() - started
    finally:
        for host in hosts:
            host.stop()
    return seconds, json.loads(out)


def failover(folder, url, grading, tmp):
    """(seconds from the kill to the job taken again, to the job's result stored)."""
    doomed, other = Host(url, "host-1", grading), Host(url, "host-2", grading)
    for host in (doomed, other):
        host.output.wait_for(r"^Connected to the farm broker")
    run = collector(folder, url, tmp)
    try:
        took = doomed.output.wait_for(r"^Took ")
        name = re.match(r"^Took '(.+)' \(job ", took).group(1)
        killed = time.monotonic()
        os.kill(doomed.process.pid, signal.SIGKILL)
        other.output.wait_for(rf"^Took {re.escape(repr(name))} .*again")
        retaken = time.monotonic() - killed
        run.out.wait_for(rf"^\d+ of \d+  {re.escape(name)}: ", timeout=300)
        stored = time.monotonic() - killed
        finished(run, timeout=1200)
    finally:
        other.stop()
    return retaken, stored


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("farm_bench needs root: the farm's hosts grade in the sandbox")
    count = len(CLASS)
    tmp = Path(tempfile.mkdtemp(prefix="nightjar-farm-bench-"))
    farm_node, grading_node = PrivateNode().start(), PrivateNode().start()
    try:
        farm_node.wait_ready()
        grading_node.wait_ready()
        grading = GradingBroker(grading_node.url, grading_node.management_url)
        admin = Admin(farm_node.management_url, farm_node.url)
        folder = make_class(tmp / "class")
        print(f"{count} submissions, {len(os.sched_getaffinity(0))} cores; farm broker and grading"
              " node on this machine", flush=True)

        def fresh(run_name):
            tenant = admin.create_tenant("farm-bench")
            (tmp / run_name).mkdir()
            return tenant.url(port=farm_node.port), tmp / run_name

        local_seconds, local_report = local_batch(folder, grading)
        verdicts = {s["name"]: s["checks"] for s in local_report["submissions"]}
        print(f"local batch, --jobs 2:       {local_seconds:6.1f} s  {60 * count / local_seconds:5.1f}"
              " submissions/min", flush=True)
        url, folder_tmp = fresh("two-slots")
        farm_seconds, report = farm_run(folder, url, grading, folder_tmp, [2])
        same = {s["name"]: s["checks"] for s in report["submissions"]} == verdicts
        print(f"farm, 1 host with 2 slots:   {farm_seconds:6.1f} s  {60 * count / farm_seconds:5.1f}"
              f" submissions/min; coordination {(farm_seconds - local_seconds) / count:+.2f} s a"
              f" submission; verdicts {'the same' if same else 'DIFFERENT'}", flush=True)
        rates = {}
        for hosts in (1, 2, 3):
            url, folder_tmp = fresh(f"hosts-{hosts}")
            seconds, report = farm_run(folder, url, grading, folder_tmp, [1] * hosts)
            rates[hosts] = 60 * count / seconds
            print(f"farm, {hosts} host(s) of 1 slot: {seconds:6.1f} s  {rates[hosts]:5.1f}"
                  " submissions/min", flush=True)
        url, folder_tmp = fresh("failover")
        retaken, stored = failover(folder, url, grading, folder_tmp)
        print(f"failover: a killed host's job taken again after {retaken:.2f} s, its result stored"
              f" {stored:.1f} s after the kill", flush=True)
        per_host = 60 * count / farm_seconds  # a host like this one, two slots
        print(f"on paper, hosts like this one (2 cores, 2 slots, {per_host:.1f} submissions/min each):")
        for total in (1000, 10000):
            for hosts in (10, 50):
                minutes = total / (per_host * hosts)
                print(f"  {total:6d} submissions on {hosts:2d} hosts: {minutes:6.1f} min")
    finally:
        farm_node.stop()
        grading_node.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
