#!/usr/bin/env python3
"""Measure the Workstation worker on the real broker.

1. Start-up: wall time of `python3 worker.py` from process start to exit,
   processing one message (median of --runs, default 21).
2. Throughput: `worker.py --drain` over --messages messages (default 2000) with the unit 3
   handler, against a bare pika loop doing the same basic_get + INSERTs +
   commit + ack in the same run, on the same kind of database.
3. The delivery history's cost: start-up and --drain (wall and CPU time) with the history
   recorded and with NIGHTJAR_HISTORY=off, in alternating runs (--rounds
   drains each, every drain on a fresh database; the recorded history file
   is kept across rounds, so it grows and is compacted as in a long lab).

Uses its own queues and temporary databases; removes them afterwards.
"""

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labkit import Lab  # noqa: E402
from nightjar import broker, db as database, history  # noqa: E402


def fill(lab, count):
    connection = broker.connect(lab.settings)
    channel = broker.open_channel(connection, lab.settings)
    for n in range(count):
        broker.publish_job(channel, lab.settings, f"R-{n + 2:04d}", f"Guest {n}")
    connection.close()


def startup(lab, runs):
    times = []
    for _ in range(runs):
        fill(lab, 1)
        started = time.perf_counter()
        result = lab.run("worker.py")
        times.append(time.perf_counter() - started)
        assert result.returncode == 0 and "Handler returned." in result.stdout, result
    return times


def drain_with_worker(lab, messages):
    fill(lab, messages)
    started = time.perf_counter()
    result = lab.run("worker.py", "--drain", timeout=600)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0 and result.stdout.count("Handler returned.") == messages
    return elapsed


def drain_bare(lab, messages):
    """The same work without the worker: basic_get, two INSERTs, commit, ack."""
    fill(lab, messages)
    started = time.perf_counter()
    db = database.connect(str(lab.tmp / "bare.db"))
    connection = broker.connect(lab.settings)
    channel = connection.channel()
    done = 0
    while True:
        method, _props, body = channel.basic_get(lab.queue)
        if method is None:
            break
        job = json.loads(body)
        with db:
            if db.execute("INSERT OR IGNORE INTO completed VALUES (?)", (job["id"],)).rowcount:
                db.execute("INSERT INTO tickets(registration_id,name) VALUES (?,?)",
                           (job["id"], job["name"]))
        channel.basic_ack(method.delivery_tag)
        done += 1
    connection.close()
    elapsed = time.perf_counter() - started
    assert done == messages
    return elapsed


def with_cpu(measure):
    """(wall seconds measure() returns, CPU seconds the programs it ran used: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = measure()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def history_cost(tmp, runs, messages, rounds):
    """{"start"|"drain": {"on"|"off": [(wall s, CPU s)]}}, measured in alternating back-to-back pairs."""
    labs = {"on": Lab(tmp / "on", queue_prefix="bench.on"), "off": Lab(tmp / "off", queue_prefix="bench.off")}
    labs["on"].extra_env[history.ENV] = str(tmp / "on" / "kept.history.jsonl")
    labs["off"].extra_env[history.ENV] = "off"
    found = {"start": {"on": [], "off": []}, "drain": {"on": [], "off": []}}
    try:
        for lab in labs.values():
            lab.use_handler("unit3")
        for n in range(runs):
            for name in (("on", "off") if n % 2 == 0 else ("off", "on")):
                found["start"][name].append(with_cpu(lambda: startup(labs[name], 1)[0]))
        for n in range(rounds):
            for name in (("on", "off") if n % 2 == 0 else ("off", "on")):
                labs[name].db_path = str(tmp / name / f"round{n}.db")
                found["drain"][name].append(with_cpu(lambda: drain_with_worker(labs[name], messages)))
    finally:
        for lab in labs.values():
            lab.cleanup()
    return found


def cost(pairs, which):
    """The history's cost in %: the median of on/off ratios of back-to-back pairs (a pair shares
    the machine's load of the moment, which on a shared machine drifts); which: 0 wall, 1 CPU."""
    ratios = [on[which] / off[which] for on, off in zip(pairs["on"], pairs["off"])]
    return (statistics.median(ratios) - 1) * 100


def median(pairs, name, which):
    return statistics.median(times[which] for times in pairs[name])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="start-up runs (default 21)")
    parser.add_argument("--messages", type=int, default=2000, help="messages to drain (default 2000)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="drains with and without the history, alternating (default 5 each)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="nightjar-bench-"))
    lab = Lab(tmp, queue_prefix="bench")
    lab.use_handler("unit3")
    try:
        times = startup(lab, args.runs)
        print(f"worker.py start to exit, one message: median {statistics.median(times):.3f} s"
              f" (min {min(times):.3f}, max {max(times):.3f}, {args.runs} runs)")
        worker = drain_with_worker(lab, args.messages)
        bare = drain_bare(lab, args.messages)
        print(f"--drain {args.messages} messages: worker {worker:.2f} s ({args.messages / worker:.0f}/s),"
              f" bare pika loop {bare:.2f} s ({args.messages / bare:.0f}/s),"
              f" ratio {bare / worker:.2f} (bare time / worker time)")
        found = history_cost(tmp, args.runs, args.messages, args.rounds)
        start, drain = found["start"], found["drain"]
        print(f"delivery history on / off, alternating: start to exit median {median(start, 'on', 0):.3f} /"
              f" {median(start, 'off', 0):.3f} s ({cost(start, 0):+.1f} %; CPU {cost(start, 1):+.1f} %),"
              f" --drain {args.messages} median {median(drain, 'on', 0):.2f} / {median(drain, 'off', 0):.2f} s"
              f" ({cost(drain, 0):+.1f} %; CPU {median(drain, 'on', 1):.2f} / {median(drain, 'off', 1):.2f} s,"
              f" {cost(drain, 1):+.1f} %)")
    finally:
        lab.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
