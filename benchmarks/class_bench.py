#!/usr/bin/env python3
"""Measure the course's live class page: labs' events in, the class view out, on this machine.

    .venv/bin/python benchmarks/class_bench.py [--labs 300] [--seconds 30] [--warmup 10]

The course's service (course/service.py) runs as its own process, as in a course, beside a
stand-in for the hub's REST API (this process: it answers who a token belongs to, the
learners and their servers, as JupyterHub does). --labs simulated labs each post one event a
second, as a lab's console does (course_events.py: a batch a second, on the websocket it
keeps open), each with its own token; one staff stream (GET live) is read meanwhile. Figures:
- event to the instructor's page: from a lab's post to its row in the staff's stream
  (each event is a Check whose "missing" line carries its send time), p50 and p95;
- the service's CPU (its process's user and system time over the measured seconds, as a
  share of one core) and its largest resident memory;
- the class page with --labs rows drawn in Chromium: from the page's navigation to its
  rows laid out (the page's own mark), median of 5 loads.
"""

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tornado.httpclient
import tornado.web
import tornado.websocket

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from nightjar.harness.rabbitnode import free_port  # noqa: E402

PREFIX = "/services/nightjar/"
SERVICE_TOKEN = secrets.token_hex(16)
STAFF_TOKEN = secrets.token_hex(16)
PROFILE = os.environ.get("PROFILE_ARGS", "").split()
ACCESS = "access:services!service=nightjar"


def lab_name(n):
    return f"lab-{n:03d}"


class Hub:
    """What the service asks of the hub: who a token is, the users, the waiting sign-ups."""

    def __init__(self, labs):
        self.tokens = {STAFF_TOKEN: self.model("instructor", admin=True)}
        self.users = [self.model(lab_name(n)) for n in range(labs)]
        for n, user in enumerate(self.users):
            self.tokens[f"token-{n}"] = user

    @staticmethod
    def model(name, admin=False):
        return {"kind": "user", "name": name, "admin": admin, "groups": [], "scopes": [ACCESS],
                "last_activity": None, "servers": {} if admin else {"": {"ready": True}}}

    def app(self):
        hub = self

        class Api(tornado.web.RequestHandler):
            def get(self, path):
                token = self.request.headers.get("Authorization", "").removeprefix("token ").strip()
                if path == "user":
                    if token not in hub.tokens:
                        raise tornado.web.HTTPError(403)
                    self.finish(hub.tokens[token])
                    return
                if token != SERVICE_TOKEN:
                    raise tornado.web.HTTPError(403)
                if path == "users":
                    self.finish(json.dumps(hub.users + [hub.tokens[STAFF_TOKEN]]))
                elif path == "users/instructor":
                    self.finish(hub.tokens[STAFF_TOKEN])
                elif path == "nightjar/waiting":
                    self.finish({"waiting": [], "authorize": "/hub/authorize"})
                else:
                    raise tornado.web.HTTPError(404)

        return tornado.web.Application([(r"/hub/api/(.*)", Api)])


def service(folder, hub_port, port):
    env = dict(os.environ, JUPYTERHUB_API_URL=f"http://127.0.0.1:{hub_port}/hub/api",
               JUPYTERHUB_API_TOKEN=SERVICE_TOKEN, JUPYTERHUB_SERVICE_PREFIX=PREFIX,
               JUPYTERHUB_SERVICE_NAME="nightjar", JUPYTERHUB_CLIENT_ID="service-nightjar",
               JUPYTERHUB_HOST="", JUPYTERHUB_OAUTH_CALLBACK_URL=PREFIX + "oauth_callback",
               NIGHTJAR_COURSE_SERVICE_DATA=str(folder), NIGHTJAR_COURSE_SERVICE_PORT=str(port),
               NIGHTJAR_LTI_TOOL_KEY=str(folder / "tool-key.pem"),
               # No grading here: a farm broker that never answers (the service tries again, idle).
               NIGHTJAR_COURSE_FARM_URL="amqp://guest:guest@127.0.0.1:1/%2F",
               PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, *PROFILE, "-m", "course.service"], cwd=ROOT, env=env,
                            stdout=open(folder / "service.log", "w"), stderr=subprocess.STDOUT)


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


async def run(options):
    hub = Hub(options.labs)
    hub_port, port = free_port(), free_port()
    hub.app().listen(hub_port, "127.0.0.1")
    folder = Path(tempfile.mkdtemp(prefix="nightjar-class-bench-"))
    process = service(folder, hub_port, port)
    base = f"http://127.0.0.1:{port}{PREFIX}"
    client = tornado.httpclient.AsyncHTTPClient(max_clients=options.labs + 10)
    deadline = time.monotonic() + 30
    while True:
        try:
            await client.fetch(base + "api/class", headers={"Authorization": f"token {STAFF_TOKEN}"})
            break
        except (tornado.httpclient.HTTPClientError, OSError):
            if time.monotonic() > deadline or process.poll() is not None:
                raise SystemExit("the service did not start:\n" + (folder / "service.log").read_text())
            await asyncio.sleep(0.2)

    latencies, measuring = [], {"on": False, "posts": 0}
    buffer = {"text": ""}

    def streamed(chunk):
        buffer["text"] += chunk.decode()
        *messages, buffer["text"] = buffer["text"].split("\n\n")
        now = time.time()
        for message in messages:
            if not message.startswith("event: rows"):
                continue
            data = json.loads(message.split("data: ", 1)[1])
            if measuring["on"]:
                for row in data["rows"]:
                    sent = (row["last_check"] or {}).get("missing") or ""
                    if sent.startswith("t="):
                        latencies.append(now - float(sent[2:]))

    stream = client.fetch(base + "live", headers={"Authorization": f"token {STAFF_TOKEN}"},
                          streaming_callback=streamed, request_timeout=3600, raise_error=False)

    sockets = {}

    async def post(n, body):
        """One batch of events on the lab's websocket, opened at its first and kept, as a lab's
        console does (course_events.py)."""
        if n not in sockets:
            request = tornado.httpclient.HTTPRequest(
                f"ws://127.0.0.1:{port}{PREFIX}events/socket", headers={"Authorization": f"token token-{n}"})
            sockets[n] = await tornado.websocket.websocket_connect(request)
        await sockets[n].write_message(body)
        answer = json.loads(await sockets[n].read_message() or '{"status": "closed"}')
        if "kept" not in answer:
            failures.append(answer)
        elif measuring["on"]:
            measuring["posts"] += 1

    async def lab(n, until):
        await asyncio.sleep(n / options.labs)  # spread over the second, as labs are
        while time.monotonic() < until:
            started = time.monotonic()
            event = {"kind": "check", "unit": "2", "passed": False, "time": time.time(),
                     "missing": f"t={time.time():.6f}"}
            await post(n, json.dumps({"events": [event]}).encode())
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    failures = []
    until = time.monotonic() + options.warmup + options.seconds
    labs = [asyncio.ensure_future(lab(n, until)) for n in range(options.labs)]
    await asyncio.sleep(options.warmup)
    measuring["on"] = True
    cpu_before, at_before = cpu_seconds(process.pid), time.monotonic()
    largest = 0.0
    while time.monotonic() < until:
        largest = max(largest, rss_mib(process.pid))
        await asyncio.sleep(1)
    cpu_used = cpu_seconds(process.pid) - cpu_before
    cpu_share = cpu_used / (time.monotonic() - at_before)
    measuring["on"] = False
    await asyncio.gather(*labs)
    for socket in sockets.values():
        socket.close()

    drawn = await asyncio.to_thread(page_draws, base, 5)
    stream.add_done_callback(lambda ended: ended.exception())  # the service stops: the stream ends
    process.send_signal(signal.SIGINT)  # a profile (PROFILE_ARGS) is written on the way out
    process.wait(10)
    print(f"{options.labs} labs, 1 event a second each, {options.seconds} s measured"
          f" ({len(latencies)} events seen on the staff's stream, {len(failures)} posts refused)")
    print(f"event to the instructor's page: p50 {statistics.median(latencies):.3f} s,"
          f" p95 {percentile(latencies, 0.95):.3f} s")
    print(f"the service: {cpu_share * 100:.1f} % of one core, {largest:.0f} MiB at most;"
          f" {cpu_used * 1000 / max(1, measuring['posts']):.2f} ms of CPU an event"
          f" ({measuring['posts'] / options.seconds:.0f} events/s taken; 15 % of a core at 300/s is 0.50 ms)")
    print(f"the class page with {options.labs} rows drawn in Chromium: median {statistics.median(drawn):.0f} ms"
          f" ({', '.join(f'{d:.0f}' for d in drawn)})")


def page_draws(base, loads):
    """Navigation to the rows laid out, in ms, for each load of the class page."""
    from playwright.sync_api import sync_playwright

    from browserkit import CHROMIUM, CHROMIUM_ARGS

    found = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900},
                                      extra_http_headers={"Authorization": f"token {STAFF_TOKEN}"})
        page = context.new_page()
        for _ in range(loads):
            page.goto(base)
            page.wait_for_function("document.body.dataset.drawn", timeout=30_000)
            found.append(float(page.evaluate("document.body.dataset.drawn")))
        browser.close()
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labs", type=int, default=300)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=10)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
