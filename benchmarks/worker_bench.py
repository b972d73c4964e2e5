#!/usr/bin/env python3
"""Measure the Workstation worker on the real broker.

1. Start-up: wall time of `python3 worker.py` from process start to exit,
   processing one message (median of RUNS).
2. Throughput: `worker.py --drain` over MESSAGES messages with the unit 3
   handler, against a bare pika loop doing the same basic_get + INSERTs +
   commit + ack in the same run, on the same kind of database.

Uses its own queues and temporary databases; removes them afterwards.
"""

import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labkit import Lab  # noqa: E402
from nightjar import broker, db as database  # noqa: E402

RUNS = 21
MESSAGES = 2000


def fill(lab, count):
    connection = broker.connect(lab.settings)
    channel = broker.open_channel(connection, lab.settings)
    for n in range(count):
        broker.publish_job(channel, lab.settings, f"R-{n + 2:04d}", f"Guest {n}")
    connection.close()


def startup(lab):
    times = []
    for _ in range(RUNS):
        fill(lab, 1)
        started = time.perf_counter()
        result = lab.run("worker.py")
        times.append(time.perf_counter() - started)
        assert result.returncode == 0 and "Handler returned." in result.stdout, result
    return times


def drain_with_worker(lab):
    fill(lab, MESSAGES)
    started = time.perf_counter()
    result = lab.run("worker.py", "--drain", timeout=600)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0 and result.stdout.count("Handler returned.") == MESSAGES
    return elapsed


def drain_bare(lab):
    """The same work without the worker: basic_get, two INSERTs, commit, ack."""
    fill(lab, MESSAGES)
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
    assert done == MESSAGES
    return elapsed


def main():
    tmp = Path(tempfile.mkdtemp(prefix="nightjar-bench-"))
    lab = Lab(tmp, queue_prefix="bench")
    lab.use_handler("unit3")
    try:
        times = startup(lab)
        print(f"worker.py start to exit, one message: median {statistics.median(times):.3f} s"
              f" (min {min(times):.3f}, max {max(times):.3f}, {RUNS} runs)")
        worker = drain_with_worker(lab)
        bare = drain_bare(lab)
        print(f"--drain {MESSAGES} messages: worker {worker:.2f} s ({MESSAGES / worker:.0f}/s),"
              f" bare pika loop {bare:.2f} s ({MESSAGES / bare:.0f}/s),"
              f" ratio {bare / worker:.2f} (bare time / worker time)")
    finally:
        lab.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
