#!/usr/bin/env python3
"""Measure the grading farm (grader/farm/) on this machine, as root (its hosts grade in the sandbox).

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

--peak measures instead the end of a unit as a course meets it: 30 learners
press Grade within 10 s (--grades, --within), each Grade sent as the course's
service sends it (course/grading.py; a checkout without it: a collector
process a Grade, as the service did before), to one grading host of one
slot a core with nothing else to grade. Figures: the first
and the median verdict after the first press, the last after the last press
(budget: 40 s), and how many verdicts were not the ones the same handler got
graded alone before the peak (the peak may not bend a verdict); the CPU a Grade
costs on the grading host, its grading broker, the service's side and the farm
broker; and, from those Grades alone, the per-Grade overhead: press to verdict,
less the host's own grading of it.

Uses a private farm broker and a private grading node; removes them afterwards.
"""

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from conftest import GradingBroker  # noqa: E402
from farmkit import Host, collector, finished  # noqa: E402
from labkit import HANDLERS  # noqa: E402
from nightjar.harness.rabbitnode import PrivateNode  # noqa: E402
from nightjar.rabbitadmin import Admin  # noqa: E402

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


# ---- the end of a unit: many Grades pressed at once -------------------------------------------


def cpu_seconds(pids):
    """CPU-seconds (user + system) these processes used, with their children waited for."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def node_cpu(node):
    """A private node's CPU-seconds so far: every process of its process group."""
    group = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getpgid(int(entry.name)) == node.process.pid:
                group.append(int(entry.name))
        except OSError:
            pass
    return cpu_seconds(group)


def service_cpu():
    """CPU-seconds of this process and of the children it waited for (collector processes)."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def course_grade(url, tmp):
    """The course's Grade: course/grading.py's, or (before it) a collector process a Grade."""
    try:
        from course.grading import Grading
    except ImportError:
        async def by_collector(learner, handler):
            folder = tmp / "presses" / learner
            (folder / learner).mkdir(parents=True)
            (folder / learner / "handler.py").write_bytes(handler)
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "grader", "--handlers", str(folder), "--farm", url, "--json",
                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                env=dict(os.environ, NIGHTJAR_LOCAL_VAR=str(tmp / "var")))
            out, _ = await process.communicate()
            [graded] = json.loads(out)["submissions"]
            return graded["status"], [check["passed"] for check in graded["checks"]]
        return by_collector, None
    grading = Grading(url, folder=tmp / "service")

    async def by_service(learner, handler):
        graded = await grading.grade(learner, handler)
        return graded.status, [check["passed"] for check in graded.checks]
    return by_service, grading


async def press(grade, presses):
    """[(pressed, verdict's time, (status, [check passed]))] for [(seconds from now, learner,
    handler.py)]."""
    start = time.monotonic()

    async def one(offset, learner, handler):
        await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
        pressed = time.monotonic()
        verdict = await grade(learner, handler)
        return pressed, time.monotonic(), verdict
    return await asyncio.gather(*(one(*p) for p in presses))


def peak(url, grading_broker, farm_node, grading_node, tmp, grades, within):
    handlers = [path.read_bytes() for path in CLASS.values()]
    host = Host(url, "host-1", grading_broker, slots=len(os.sched_getaffinity(0)))  # one job a core
    slots = int(re.search(r"taking up to (\d+) job", host.output.wait_for(r"^Connected")).group(1))
    loop = asyncio.new_event_loop()
    grade, grading = course_grade(url, tmp)
    try:
        # Each handler of the peak graded alone first (the first twice: it warms the host up):
        # the per-Grade overhead, and the verdicts the peak must give too.
        overheads, quiet = [], {}
        used = range(min(grades, len(handlers)))
        for number, which in enumerate([0, *used]):
            learner = f"alone{number}"
            [(pressed, answered, quiet[which])] = loop.run_until_complete(
                press(grade, [(0, learner, handlers[which])]))
            done = host.output.wait_for(rf"^Done '{learner}' .*\(([\d.]+) s\)\.$")
            overheads.append(answered - pressed - float(re.search(r"\(([\d.]+) s\)\.$", done).group(1)))
        before = (cpu_seconds([host.process.pid]), node_cpu(grading_node), service_cpu(),
                  node_cpu(farm_node))
        presses = [(n * within / max(grades - 1, 1), f"learner{n:02}", handlers[n % len(handlers)])
                   for n in range(grades)]  # the same order as `used`
        load = os.getloadavg()[0]
        results = loop.run_until_complete(press(grade, presses))
        after = (cpu_seconds([host.process.pid]), node_cpu(grading_node), service_cpu(),
                 node_cpu(farm_node))
    finally:
        if grading is not None:
            loop.run_until_complete(grading.close())
        loop.close()
        host.stop()
    first_press, last_press = results[0][0], results[-1][0]
    verdicts = sorted(answered for _, answered, _ in results)
    not_graded = sum(status != "graded" for _, _, (status, _) in results)
    other = sum(verdict != quiet[n % len(handlers)] for n, (*_, verdict) in enumerate(results))
    host_cpu, node, service, farm_broker = ((b - a) / grades for a, b in zip(before, after))
    print(f"one Grade alone: a per-Grade overhead of {statistics.median(overheads[1:]):.2f} s"
          " (press to verdict, less the host's grading of it)")
    print(f"peak: {grades} Grades pressed within {within:g} s, one grading host of {slots} slots"
          f" ({len(os.sched_getaffinity(0))} cores), load {load:.1f}: first verdict"
          f" {verdicts[0] - first_press:.1f} s after the first press, median"
          f" {statistics.median(verdicts) - first_press:.1f} s, last {verdicts[-1] - last_press:.1f} s"
          f" after the last press; {not_graded} not graded, {other} verdicts other than the same"
          " handler's graded alone")
    print(f"peak CPU a Grade: {host_cpu + node:.2f} s on the grading host (grader and workers"
          f" {host_cpu:.2f}, its grading broker {node:.2f}), {service:.2f} s the service's side,"
          f" {farm_broker:.2f} s the farm broker")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peak", action="store_true", help="measure the end of a unit only")
    parser.add_argument("--grades", type=int, default=30, help="with --peak: Grades pressed (30)")
    parser.add_argument("--within", type=float, default=10.0,
                        help="with --peak: seconds over which they are pressed (10)")
    options = parser.parse_args()
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

        def fresh(run_name):
            tenant = admin.create_tenant("farm-bench")
            (tmp / run_name).mkdir()
            return tenant.url(port=farm_node.port), tmp / run_name

        if options.peak:
            url, folder_tmp = fresh("peak")
            peak(url, grading, farm_node, grading_node, folder_tmp, options.grades, options.within)
            return
        print(f"{count} submissions, {len(os.sched_getaffinity(0))} cores; farm broker and grading"
              " node on this machine", flush=True)

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
