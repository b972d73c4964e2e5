#!/usr/bin/env python3
"""Measure a course (course/): what a learner's lab costs and how long learners wait, on this machine.

    .venv/bin/python benchmarks/course_bench.py [--learners 30] [--workers 10] [--arrivals 20]
                                                [--grades 5,15,30] [--slots N]

A course of its own (tests/coursekit.py: the hub, its proxy, DockerSpawner, the course's
RabbitMQ 4.3, the course's service and a grading farm with one grading host of --slots
slots, one a core by default), removed afterwards. Learners sign up through the hub's form
and are authorized by the instructor, as in a course. Figures:
- login to a terminal ready: a learner's browser (Chromium) logs in at the hub's form,
  which leads to their lab (the hub starts it), and waits until the console's terminal
  is connected; one learner alone 5 times (p50, p95), then --arrivals learners arriving in
  the same minute (each at a random second of it, each in a browser context of their own
  of one Chromium), and of that the hub's own start of each lab (from its log);
- memory of a lab at rest (docker stats, MiB), the median and the largest over the labs;
- with --learners labs each with a terminal open (a websocket to its console) and
  --workers of them running `desk.py register` and `worker.py` in a loop: keystroke to
  echo in one learner's page (benchmarks/console_bench.py's measure), p50 and p95;
- the time from the first to the last verdict when N learners press Grade in the same
  minute (each at a random second), for each N of --grades.
"""

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from playwright.async_api import async_playwright, expect as async_expect  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402
from tornado.httpclient import AsyncHTTPClient, HTTPRequest  # noqa: E402
from tornado.websocket import websocket_connect  # noqa: E402

from browserkit import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from console_bench import measure_typing, percentile  # noqa: E402
from coursekit import Course, landed_in_lab, log_in_page  # noqa: E402


def ms(seconds):
    return round(seconds * 1000)


async def arrivals(course, sessions, offsets):
    """Seconds from login to terminal of each learner, arriving `offset` seconds from now, each in
    a context of their own (cookies, pages) of one Chromium: one machine drives them all."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        start = time.monotonic()

        async def arrive(session, offset):
            await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
            context = await browser.new_context()
            began = time.monotonic()
            page = await context.new_page()
            await page.goto(f"{course.url}/hub/login")
            await page.get_by_label("Username").fill(session.name)
            await page.get_by_label("Password").fill(session.password)
            await page.get_by_role("button", name="Sign in").click()
            # The login lands in the learner's lab: the hub starts it and shows its progress meanwhile.
            await async_expect(page.get_by_role("heading", level=1)).to_have_text(
                "Nightjar lab console", timeout=120_000)
            await async_expect(page.locator("#terminal-status")).to_contain_text(
                "Connected to the Workstation", timeout=60_000)
            took = time.monotonic() - began
            await context.close()
            return took

        try:
            return await asyncio.gather(*(arrive(s, o) for s, o in zip(sessions, offsets)))
        finally:
            await browser.close()


def logins(course, sessions, offsets):
    """arrivals() from this thread, whose Playwright is the sync one."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, arrivals(course, sessions, offsets)).result()


class Terminals:
    """Websockets to many labs' terminals, open in one event loop, as many open tabs would be."""

    def __init__(self):
        AsyncHTTPClient.configure(None, max_clients=200)  # every Grade of a class at once
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.sockets = []

    def open(self, course, name, token):
        async def connect():
            url = course.lab_url(name).replace("http://", "ws://") + "terminal?rows=24&cols=80"
            socket = await websocket_connect(HTTPRequest(url, headers={
                "Authorization": f"token {token}", "Origin": course.url}))
            self.sockets.append(socket)
            while await socket.read_message() is not None:  # what the shell shows, read and dropped
                pass
        asyncio.run_coroutine_threadsafe(connect(), self.loop)

    def grade(self, course, name, token):
        """When this learner's Grade answered (through their console, as the button does)."""
        async def ask():
            answer = await AsyncHTTPClient().fetch(
                course.lab_url(name) + "api/grade", method="POST", body=b"", request_timeout=900,
                headers={"Authorization": f"token {token}"})
            assert "passed" in json.loads(answer.body), answer.body[:300]
            return time.monotonic()
        return asyncio.run_coroutine_threadsafe(ask(), self.loop)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--learners", type=int, default=30)
    parser.add_argument("--workers", type=int, default=10)
    parser.add_argument("--arrivals", type=int, default=20)
    parser.add_argument("--grades", default="5,15,30")
    parser.add_argument("--slots", type=int, help="the grading host's slots (default: one a core)")
    parser.add_argument("--keys", type=int, default=100)
    options = parser.parse_args()
    grades = [int(n) for n in options.grades.split(",")]
    figures = {}
    with tempfile.TemporaryDirectory() as folder:
        course = Course(folder, **({"NIGHTJAR_FARM_SLOTS": str(options.slots)} if options.slots else {}))
        started = time.monotonic()
        course.up()
        figures["make_course_s"] = round(time.monotonic() - started, 1)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                figures.update(measure(course, browser, options, grades))
        finally:
            course.down()
    print(json.dumps(figures, indent=2))


def measure(course, browser, options, grades):
    figures = {}
    random.seed(36)
    learners = [course.learner(f"learner{n:03}") for n in range(max(options.learners, options.arrivals, 1))]

    # One learner alone, 5 times (the lab stopped in between).
    alone = []
    for _ in range(5):
        alone += logins(course, [learners[0]], [0.0])
        course.stop_lab(learners[0].name)
    figures["login_to_terminal_alone_s"] = {"p50": round(statistics.median(alone), 2),
                                           "p95": round(percentile(alone, 0.95), 2)}
    print(f"login to terminal, one learner: {figures['login_to_terminal_alone_s']}", flush=True)

    # --arrivals learners in the same minute, each in a browser context of their own.
    arriving = learners[1:options.arrivals + 1] if options.arrivals < len(learners) else learners[:options.arrivals]
    offsets = sorted(random.uniform(0, 60) for _ in arriving)
    results = logins(course, arriving, offsets)
    figures["login_to_terminal_arrivals_s"] = {"learners": len(arriving),
                                              "p50": round(statistics.median(results), 2),
                                              "p95": round(percentile(results, 0.95), 2)}
    print(f"login to terminal, {len(arriving)} in a minute: {figures['login_to_terminal_arrivals_s']}",
          flush=True)
    # Of that, the hub's own start of each lab (its log: "User NAME took N seconds to start").
    starts = spawn_seconds(course, {session.name for session in arriving})
    figures["lab_start_by_the_hub_arrivals_s"] = {"labs": len(starts), "p50": round(statistics.median(starts), 2),
                                                 "p95": round(percentile(starts, 0.95), 2)}
    print(f"of which the hub starting the lab: {figures['lab_start_by_the_hub_arrivals_s']}", flush=True)

    # Every learner's lab running, a terminal open on each; some running workers in a loop.
    tokens = {}
    for session in learners[:options.learners]:
        course.start_lab(session.name)
        tokens[session.name] = course.api("POST", f"users/{session.name}/tokens",
                                          {"note": "course_bench"}, expect_status=201)["token"]
    time.sleep(20)  # the labs settle
    memory = course.docker("stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}}").stdout
    labs = [parse_mib(line.split()[1]) for line in memory.splitlines()
            if line.startswith(f"{course.project}-learner")]
    figures["memory_per_lab_at_rest_mib"] = {"labs": len(labs), "median": round(statistics.median(labs), 1),
                                            "largest": round(max(labs), 1)}
    print(f"memory per lab at rest: {figures['memory_per_lab_at_rest_mib']}", flush=True)
    terminals = Terminals()
    for name, token in list(tokens.items())[1:]:
        terminals.open(course, name, token)
    for session in learners[1:options.workers + 1]:
        course.docker("exec", "-d", "--user", "1000", course.names(session.name).container, "bash", "-c",
                      "while true; do python3 desk.py register Loop >/dev/null; python3 worker.py"
                      " >/dev/null; sleep 1; done")
    page = log_in_page(browser.new_context(), course, learners[0].name, learners[0].password)
    landed_in_lab(page, course, learners[0].name)
    typed = measure_typing(page, options.keys)
    figures["keystroke_echo_ms"] = {"learners": options.learners, "working": options.workers,
                                    "p50": round(statistics.median(typed), 1),
                                    "p95": round(percentile(typed, 0.95), 1)}
    print(f"keystroke to echo: {figures['keystroke_echo_ms']}", flush=True)

    # N learners press Grade in the same minute.
    names = list(tokens)
    for count in grades:
        chosen = names[:count]
        offsets = [random.uniform(0, 60) for _ in chosen]
        begun = time.monotonic()
        futures = []
        for offset, name in sorted(zip(offsets, chosen)):
            time.sleep(max(0, begun + offset - time.monotonic()))
            futures.append((begun + offset, terminals.grade(course, name, tokens[name])))
        first_press = min(at for at, _ in futures)
        last_verdict = max(future.result(timeout=1800) for _, future in futures)
        figures[f"last_verdict_{count}_graders_s"] = round(last_verdict - first_press, 1)
        print(f"{count} press Grade in a minute: the last verdict {figures[f'last_verdict_{count}_graders_s']}"
              " s after the first press", flush=True)
    return figures


def spawn_seconds(course, names):
    """How long the hub took to start each of these learners' labs, from its log."""
    log = course.docker("logs", course.hub_container).stderr  # the hub logs to its stderr
    took = re.findall(r"User (\S+) took ([\d.]+) seconds to start", log)
    return [float(seconds) for name, seconds in took if name in names]


def parse_mib(text):
    number = float("".join(c for c in text if c.isdigit() or c == "."))
    return number / 1024 if text.endswith("KiB") else number * 1024 if text.endswith("GiB") else number


if __name__ == "__main__":
    main()
