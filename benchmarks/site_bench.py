#!/usr/bin/env python3
"""Measure the Nightjar site on the real broker (loopback only).

1. Registration: latency of the form POST (save, publish with publisher
   confirm, 303), sequential, median and 90th percentile of POSTS requests;
   and the same work in-process (queueing.register) to show what is HTTP.
2. Load: requests per second on a registration page (with its ticket) for
   LOAD_SECONDS, from a second process: wrk when installed, else a bounded
   Python loop in a subprocess.
3. `make local`: seconds from starting it to the site answering /healthz,
   with the machine's broker (median of LOCAL_RUNS) and once with a private
   node started by make local.
4. The registration page with a delivery history of HISTORY_DELIVERIES real
   deliveries of one registration (the unit 3 handler, --drain): its render
   time, sequential, median of PAGE_GETS requests, beside a page whose
   registration has one delivery.

Uses its own queue, database, var/ and Workstation folder in a temporary
directory; removes the queues and stops what it started.
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from labkit import Lab  # noqa: E402
from nightjar import broker, queueing  # noqa: E402
from sitekit import FormClient, Site, answers, free_port, node_port  # noqa: E402

POSTS = 200
LOAD_SECONDS = 30
LOAD_CONNECTIONS = 16
LOCAL_RUNS = 5
HISTORY_DELIVERIES = 200
PAGE_GETS = 100

PY_LOAD = r"""
import sys, threading, time, urllib.request
url, seconds, workers = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
deadline = time.monotonic() + seconds
counts = [0] * workers
def run(i):
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url, timeout=10) as r:
            r.read()
        counts[i] += 1
threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
start = time.monotonic()
[t.start() for t in threads]; [t.join() for t in threads]
print(sum(counts) / (time.monotonic() - start))
"""


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def registration_latency(lab, site):
    guest = FormClient(site.url)
    token = guest.token()
    for n in range(10):  # warm-up
        guest.post_name(f"Warm-up {n}", token)
    timings = []
    for n in range(POSTS):
        started = time.perf_counter()
        status, _ = guest.post_name(f"Guest {n}", token)
        timings.append(time.perf_counter() - started)
        assert status == 303
    direct = []
    db = lab.db()
    for n in range(50):
        started = time.perf_counter()
        _, queued = queueing.register(db, lab.settings, f"Direct {n}")
        direct.append(time.perf_counter() - started)
        assert queued
    db.close()
    return {
        "post_median_ms": round(statistics.median(timings) * 1000, 2),
        "post_p90_ms": round(percentile(timings, 0.9) * 1000, 2),
        "in_process_register_median_ms": round(statistics.median(direct) * 1000, 2),
    }


def load(url):
    if shutil.which("wrk"):
        out = subprocess.run(["wrk", "-t2", f"-c{LOAD_CONNECTIONS}", f"-d{LOAD_SECONDS}s", url],
                             capture_output=True, text=True, check=True).stdout
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
        errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
        latency = re.search(r"Latency\s+(\S+)", out).group(1)
        return {"tool": f"wrk -t2 -c{LOAD_CONNECTIONS} -d{LOAD_SECONDS}s",
                "requests_per_second": rps, "mean_latency": latency,
                "non_2xx": int(errors.group(1)) if errors else 0}
    out = subprocess.run([sys.executable, "-c", PY_LOAD, url, str(LOAD_SECONDS),
                          str(LOAD_CONNECTIONS)], capture_output=True, text=True, check=True)
    return {"tool": f"python urllib, {LOAD_CONNECTIONS} threads, {LOAD_SECONDS}s",
            "requests_per_second": round(float(out.stdout), 1)}


def make_local_seconds(lab, run, **extra):
    port = free_port()
    env = dict(lab.env, NIGHTJAR_LOCAL_VAR=str(lab.tmp / f"var{run}"),
               NIGHTJAR_WORKSTATION=str(lab.tmp / f"ws{run}" / "ticket-desk"),
               NIGHTJAR_DB=str(lab.tmp / f"local{run}.db"), NIGHTJAR_SITE_PORT=str(port), **extra)
    url = f"http://127.0.0.1:{port}/"
    started = time.perf_counter()
    process = subprocess.Popen(["make", "-s", "-C", str(ROOT), "local"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while not answers(url):
        if process.poll() not in (None, 0):
            raise SystemExit(f"make local failed: {process.stdout.read()}")
        time.sleep(0.02)
    seconds = time.perf_counter() - started
    process.communicate(timeout=60)
    subprocess.run(["make", "-s", "-C", str(ROOT), "stop"], env=env, check=True,
                   capture_output=True)
    return seconds


def page_with_history(lab, site):
    """Median ms of GET on a registration page with HISTORY_DELIVERIES deliveries, and with one."""
    lab.use_handler("unit3")
    many, one = lab.register("Often delivered"), lab.register("Once delivered")
    connection = broker.connect(lab.settings)
    channel = broker.open_channel(connection, lab.settings)
    for _ in range(HISTORY_DELIVERIES - 1):
        broker.publish_job(channel, lab.settings, many, "Often delivered")
    connection.close()
    assert lab.run("worker.py", "--drain", timeout=600).returncode == 0
    client = FormClient(site.url)
    medians = {}
    for name, registration_id in (("history", many), ("one_delivery", one)):
        times = []
        for _ in range(PAGE_GETS):
            started = time.perf_counter()
            status, text = client.get(f"registrations/{registration_id}")
            times.append((time.perf_counter() - started) * 1000)
            assert status == 200 and "Delivery history" in text
        medians[name] = round(statistics.median(times), 1)
    return medians


def main():
    results = {}
    with tempfile.TemporaryDirectory(prefix="nightjar-site-bench-") as tmp:
        lab = Lab(Path(tmp))
        site = Site(lab, log_name="bench-site.log")
        try:
            results["registration"] = registration_latency(lab, site)
            lab.run("worker.py", "--drain", timeout=300)
            results["registration_page_load"] = load(site.url + "registrations/R-0002")
            results["history_page_ms"] = page_with_history(lab, site)
        finally:
            site.stop()
            lab.cleanup()

        local_lab = Lab(Path(tmp) / "local")
        try:
            runs = [make_local_seconds(local_lab, n) for n in range(LOCAL_RUNS)]
            results["make_local"] = {
                "machine_broker_median_s": round(statistics.median(runs), 2),
                "machine_broker_runs_s": [round(r, 2) for r in runs],
            }
            if os.path.exists("/usr/lib/rabbitmq/bin/rabbitmq-server"):
                port = node_port()
                results["make_local"]["private_node_s"] = round(make_local_seconds(
                    local_lab, "private", NIGHTJAR_AMQP_URL="amqp://guest:guest@127.0.0.1:1/%2F",
                    NIGHTJAR_LOCAL_BROKER_PORT=str(port),
                    NIGHTJAR_LOCAL_NODE=f"nightjar-bench-{port}@localhost"), 2)
        finally:
            local_lab.cleanup()

    reg, page, local = results["registration"], results["registration_page_load"], results["make_local"]
    print(f"Registration POST (save + publish with confirm + 303), {POSTS} sequential:"
          f" median {reg['post_median_ms']} ms, p90 {reg['post_p90_ms']} ms"
          f" (in-process register(): median {reg['in_process_register_median_ms']} ms)")
    print(f"Registration page under load ({page['tool']}): {page['requests_per_second']:.0f} requests/s")
    pages = results["history_page_ms"]
    print(f"Registration page with {HISTORY_DELIVERIES} deliveries in its history: median"
          f" {pages['history']} ms (one delivery: {pages['one_delivery']} ms), {PAGE_GETS} sequential GETs")
    print(f"make local to the site answering: median {local['machine_broker_median_s']} s"
          f" (machine's broker)" + (f", {local['private_node_s']} s starting a private node"
                                     if "private_node_s" in local else ""))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
