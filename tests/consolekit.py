"""The lab console for tests, as local processes: its agent in a throwaway lab's Workstation
folder (as the Workstation container runs it) and the console on a free port of 127.0.0.1."""

import asyncio
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from nightjar.harness.rabbitnode import free_port

TOKEN = "test-token-" + os.urandom(6).hex()


def wait_for(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout} s")
        time.sleep(0.05)


class Console:
    """`python3 -m nightjar_console.agent` and `python3 -m nightjar_console` for one lab.

    The lab (tests/labkit.py) gives the database, queue and Workstation folder;
    grader_args go to a grading service started beside it (grader/service.py),
    else the console runs the local grader."""

    def __init__(self, lab, folder, grading_broker=None, agent=True, extra_env=None):
        self.lab, self.folder = lab, Path(folder)
        self.data = self.folder / "console-data"
        self.socket = str(self.folder / "agent" / "terminal.sock")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.env = dict(lab.env, NIGHTJAR_WORKSTATION=str(lab.workstation), NIGHTJAR_CONSOLE_DATA=str(self.data),
                        NIGHTJAR_CONSOLE_SOCKET=self.socket, NIGHTJAR_CONSOLE_PORT=str(self.port),
                        NIGHTJAR_CONSOLE_TOKEN=TOKEN, NIGHTJAR_SITE_PORT="8000",
                        NIGHTJAR_MANAGEMENT_PORT="15672", NIGHTJAR_LANG="en", PYTHONUNBUFFERED="1",
                        HOME=str(self.folder),
                        # `python3` in the shell is the lab's Python, as after `source .venv/bin/activate`
                        PATH=os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]]))
        self.env.update(extra_env or {})
        self.processes = []
        self.service = None
        if grading_broker is not None:
            service_port = free_port()
            self.service = self.start("grading-service", "-m", "grader.service",
                                      "--listen", f"127.0.0.1:{service_port}", "--",
                                      *grading_broker.args, "--skip-live")
            self.env["NIGHTJAR_CONSOLE_GRADER"] = f"http://127.0.0.1:{service_port}/"
            self.wait_until_answers(f"http://127.0.0.1:{service_port}/healthz")
        if agent:
            self.start_agent()
        self.console = self.start("console", "-m", "nightjar_console")
        self.wait_until_answers(self.url + "healthz")

    def start(self, name, *args, cwd=None):
        log = open(self.folder / f"{name}.log", "wb")
        process = subprocess.Popen([sys.executable, *args], cwd=cwd or self.folder, env=self.env,
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes.append(process)
        return process

    def start_agent(self):
        self.agent = self.start("agent", "-m", "nightjar_console.agent", "--socket", self.socket,
                                cwd=self.lab.workstation)
        wait_for(lambda: os.path.exists(self.socket), 10, "the agent did not listen")

    def log(self, name):
        return (self.folder / f"{name}.log").read_text(errors="replace")

    @classmethod
    def wait_until_answers(cls, url):
        wait_for(lambda: cls.answers(url), 20, f"{url} did not answer")

    @staticmethod
    def answers(url):
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return response.status == 200
        except OSError:
            return False

    def request(self, method, path, body=None, headers=None, token=TOKEN):
        """(status, parsed JSON or text) of one request, with the token unless token=None."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"token {token}")
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            sent.setdefault("Content-Type", "application/json")
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read().decode(errors="replace")
        connection.close()
        if response.getheader("Content-Type", "").startswith("application/json"):
            return response.status, json.loads(data)
        return response.status, data

    def stop(self):
        for process in reversed(self.processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, 15)
                except ProcessLookupError:
                    pass
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, 9)
                process.wait()


def unix_request(path, message):
    """The agent's first answer to a raw request on its socket (tests of the agent itself)."""
    with socket.socket(socket.AF_UNIX) as client:
        client.connect(path)
        client.sendall((json.dumps(message) + "\n").encode())
        return json.loads(client.makefile().readline())


class TerminalClient:
    """The console's terminal websocket, driven as the page drives it (tornado's client)."""

    def __init__(self, console, origin="own", headers=None, token=TOKEN, query="rows=24&cols=80"):
        sent = dict(headers or {})
        if token is not None:
            sent.setdefault("Authorization", f"token {token}")
        if origin == "own":
            origin = f"http://127.0.0.1:{console.port}"
        if origin is not None:
            sent["Origin"] = origin
        # The loop runs in a thread of its own: a test's thread may already run
        # one (Playwright's sync API keeps its loop running between tests).
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        request = HTTPRequest(f"ws://127.0.0.1:{console.port}/terminal?{query}", headers=sent)
        async def connect():  # tornado makes its future on the running loop
            return await websocket_connect(request)

        try:
            self.ws = self._run(connect())
        except BaseException:
            self._stop_loop()
            raise
        self.shown = ""

    def receive(self, timeout=10):
        """The next message (a list), or None once the console closed the websocket."""
        async def read():
            return await asyncio.wait_for(self.ws.read_message(), timeout)

        message = self._run(read())
        return None if message is None else json.loads(message)

    def send(self, *message):
        async def write():
            await self.ws.write_message(json.dumps(list(message)))

        self._run(write())

    def type(self, text):
        self.send("stdin", text)

    def read_until(self, text, timeout=20):
        """Everything the shell showed up to and including `text` (fails after timeout)."""
        deadline = time.monotonic() + timeout
        while text not in self.shown:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not shown within {timeout} s: {self.shown[-2000:]!r}")
            try:
                message = self.receive(timeout=left)
            except asyncio.TimeoutError:
                message = ["timeout"]
            if message == ["timeout"]:
                raise AssertionError(f"{text!r} not shown within {timeout} s: {self.shown[-2000:]!r}")
            if message is None:
                raise AssertionError(f"the websocket closed before {text!r}: {self.shown[-2000:]!r}")
            if message[0] == "stdout":
                self.shown += message[1]
        shown, self.shown = self.shown.split(text, 1)
        return shown + text

    def close(self):
        self.loop.call_soon_threadsafe(self.ws.close)
        self._run(asyncio.sleep(0.05))
        self._stop_loop()

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def _stop_loop(self):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()
