"""Helpers for the site tests: the real site under waitress, and a small form client."""

import http.cookiejar
import random
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from nightjar.harness.siteprobe import site_answers as answers  # the site tests import it from here
from nightjar.harness.rabbitnode import free_port  # noqa: F401  (site tests import it from here)

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def node_port():
    """A free port whose +20000 (a private node's distribution port) is free too."""
    while True:
        port = random.randint(20000, 45535)
        with socket.socket() as amqp, socket.socket() as dist:
            try:
                amqp.bind(("127.0.0.1", port))
                dist.bind(("127.0.0.1", port + 20000))
                return port
            except OSError:
                continue


class Site:
    """`python3 -m nightjar_site` (waitress) on a free port, with the lab's database and queue."""

    def __init__(self, lab, amqp_url=None, requeue_seconds=1, log_name="site.log"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = dict(lab.env, NIGHTJAR_SITE_PORT=str(self.port), NIGHTJAR_SITE_HOST="127.0.0.1",
                   NIGHTJAR_REQUEUE_SECONDS=str(requeue_seconds), NIGHTJAR_SECRET_KEY="test-key")
        if amqp_url:
            env["NIGHTJAR_AMQP_URL"] = amqp_url
        self.log = lab.tmp / log_name
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "nightjar_site"], env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        self.wait_until_up()

    def wait_until_up(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            if answers(self.url):
                return
            time.sleep(0.05)
        raise AssertionError(f"site did not answer: {self.log.read_text()}")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class FormClient:
    """A browser-like session (cookie, CSRF token) that posts the registration form."""

    def __init__(self, base_url):
        self.base_url = base_url
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect())

    def get(self, path):
        """(status, text)."""
        try:
            with self.opener.open(self.base_url + path.lstrip("/"), timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def token(self):
        status, text = self.get("evening")
        assert status == 200
        return CSRF.search(text).group(1)

    def post_name(self, name, token):
        """(status, Location header or page text)."""
        data = urllib.parse.urlencode({"csrf_token": token, "name": name}).encode()
        try:
            with self.opener.open(self.base_url + "evening", data=data, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            if error.code in (302, 303):
                return error.code, error.headers["Location"]
            return error.code, error.read().decode()

    def register(self, name):
        """The new registration ID (R-0002, ...)."""
        status, location = self.post_name(name, self.token())
        assert status == 303, (status, location)
        return location.rsplit("/", 1)[1]
