"""A course of its own for tests and benchmarks: the hub, the course's RabbitMQ and the
learners' labs on this machine's Docker engine, started as `make course` starts one
(scripts/run_course.py), under a project name, a host port and secrets of its own.

Learners are made as a course makes them: they sign up through NativeAuthenticator's
form and the instructor authorizes them. Scripts drive the rest through JupyterHub's
REST API with the course's admin token.
"""

import http.cookiejar
import json
import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from playwright.sync_api import expect

from consolepage import console_ready
from nightjar.harness.rabbitnode import free_port
from stackkit import RABBITMQ_4_3_IMAGE, ROOT, base_images, ensure_built, run

sys.path.insert(0, str(ROOT))
from course.learners import names  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import run_course  # noqa: E402  (scripts/run_course.py: make course)

# The hub's base: Debian 13, whose Node 20 its proxy needs (scripts/build-base-images makes it).
DEBIAN_IMAGE = "nightjar-base/debian:trixie"
# What Docker says when a container's host port is taken.
PORT_TAKEN = re.compile(r"port is already allocated|address already in use", re.I)


class Course:
    def __init__(self, folder, **settings):
        self.folder = Path(folder)
        self.project = f"njc-test-{secrets.token_hex(3)}"
        self.port = free_port()  # the hub's host port, bound only minutes later: see up()
        ensure_built(RABBITMQ_4_3_IMAGE, DEBIAN_IMAGE)  # the course's brokers run RabbitMQ 4.3
        self.env = {**os.environ, **base_images(dict(os.environ)),
                    "NIGHTJAR_COURSE_RABBITMQ_IMAGE": RABBITMQ_4_3_IMAGE,
                    "NIGHTJAR_DEBIAN_IMAGE": DEBIAN_IMAGE,
                    "NIGHTJAR_COURSE_PROJECT": self.project,
                    "NIGHTJAR_COURSE_PORT": str(self.port),
                    "NIGHTJAR_COURSE_VAR": str(self.folder / "var"),
                    # Images of its own: another checkout's course may build the same tags meanwhile.
                    "NIGHTJAR_COURSE_HUB_IMAGE": f"{self.project}/hub",
                    "NIGHTJAR_LEARNER_IMAGE": f"{self.project}/learner",
                    **settings}
        self.url = f"http://127.0.0.1:{self.port}"
        self.learners = []
        self.instructor = None

    # ---- the course as make course starts it -------------------------------------------------
    def up(self):
        # The port was free when it was chosen, but Docker binds it only once the images are
        # built, minutes later: meanwhile another program may take it. Then choose again (the
        # images are built by then, so the next try binds it within seconds).
        for _ in range(3):
            done = run([sys.executable, "scripts/run_course.py", "up"], self.env, timeout=900)
            if done.returncode == 0 or not PORT_TAKEN.search(done.stdout + done.stderr):
                break
            self.port = free_port()
            self.env["NIGHTJAR_COURSE_PORT"] = str(self.port)
            self.url = f"http://127.0.0.1:{self.port}"
        assert done.returncode == 0, done.stdout + done.stderr
        found = re.search(r"Instructor's first login: user (\S+), password (\S+) ", done.stdout)
        assert found, done.stdout
        self.instructor = Session(self.url)
        self.instructor.log_in(*found.groups())
        return done.stdout

    def down(self):
        """make course-down, then what a test leaves besides: the volumes."""
        done = run([sys.executable, "scripts/run_course.py", "down"], self.env, timeout=300)
        volumes = [self.names(name).volume for name in self.learners]
        volumes += [f"{self.project}_{volume}" for volume in ("hub-data", "broker-data", "service-data", "farm-data")]
        run(["docker", "volume", "rm", "-f", *volumes], self.env)
        run(["docker", "image", "rm", f"{self.project}/hub", f"{self.project}/learner"], self.env)
        return done

    def wait_for_hub(self):
        return run_course.wait_for_hub(self.env)

    def logs(self, container):
        done = run(["docker", "logs", "--tail", "60", container], self.env)
        return done.stdout + done.stderr  # the hub logs to its stderr

    @property
    def hub_container(self):
        return f"{self.project}-hub"

    @property
    def broker_container(self):
        return f"{self.project}-broker"

    # ---- the hub's REST API, as the course's admin service ------------------------------------
    def api(self, method, path, body=None, expect_status=None):
        """The hub's answer as JSON. A hub that is restarting (the proxy answers 502 or 503 for
        it) is asked again, for a minute at most."""
        token = (self.folder / "var" / "api-token").read_text().strip()
        deadline = time.monotonic() + 60
        while True:
            request = urllib.request.Request(
                f"{self.url}/hub/api/{path}", method=method,
                data=None if body is None else json.dumps(body).encode(),
                headers={"Authorization": f"token {token}"})
            try:
                with urllib.request.urlopen(request, timeout=120) as answer:
                    status, data = answer.status, answer.read()
            except urllib.error.HTTPError as error:
                status, data = error.code, error.read()
            except OSError:
                status, data = None, b""
            if status not in (None, 502, 503) or time.monotonic() > deadline:
                break
            time.sleep(1)
        if expect_status is not None:
            assert status in ([expect_status] if isinstance(expect_status, int) else expect_status), \
                (status, data[:500], self.logs(self.hub_container) if status >= 500 else "")
        return json.loads(data) if data else None

    def learner(self, name, password=None):
        """A learner who signed up as `name` and whom the instructor authorized; their Session,
        whose name is the hub's (JupyterHub keeps user names in lower case)."""
        password = password or secrets.token_urlsafe(12)
        run_course.sign_up(self.env, name, password)
        hub_name = name.lower()
        self.learners.append(hub_name)
        self.instructor.get(f"/hub/authorize/{urllib.parse.quote(hub_name, safe='')}")
        session = Session(self.url)
        session.log_in(name, password)
        session.name, session.password = hub_name, password
        return session

    def start_lab(self, name, timeout=120):
        """Start the learner's lab through the hub's API and wait until it is ready."""
        self.api("POST", f"users/{in_url(name)}/server", expect_status=(201, 202, 400))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            server = (self.api("GET", f"users/{in_url(name)}") or {}).get("servers", {}).get("")
            if server and server.get("ready"):
                return server
            time.sleep(0.5)
        raise AssertionError(f"{name}'s lab was not ready in {timeout} s:\n"
                             + self.logs(self.names(name).container))

    def stop_lab(self, name):
        self.api("DELETE", f"users/{in_url(name)}/server", expect_status=(202, 204))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not (self.api("GET", f"users/{in_url(name)}") or {}).get("servers"):
                return
            time.sleep(0.5)
        raise AssertionError(f"{name}'s lab did not stop")

    def names(self, name):
        """The learner's names in this course (course/learners.py)."""
        return names(name, self.project)

    def network(self, name):
        """The learner's own network (course/spawners.py's network_of)."""
        return f"{self.project}-{self.names(name).slug}"

    def lab_url(self, name):
        return f"{self.url}/user/{in_url(name)}/"

    def docker(self, *args, timeout=60):
        return run(["docker", *args], self.env, timeout=timeout)


def in_lab(course, name, *command):
    """A command in the learner's lab, as the learner's user: what their terminal can do."""
    return course.docker("exec", "--user", "1000", course.names(name).container, *command)


def in_url(name):
    """A hub name as the hub puts it in its URLs (jupyterhub.utils.url_escape_path)."""
    return urllib.parse.quote(name, safe="@~")


class Session:
    """A browser-less login to the hub (NativeAuthenticator's form), for the instructor and for
    handing a learner's cookies to a browser."""

    def __init__(self, url):
        self.url = url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def get(self, path):
        with self.opener.open(self.url + path, timeout=60) as answer:
            return answer.status, answer.read().decode()

    def log_in(self, name, password):
        _, page = self.get("/hub/login")
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"_xsrf": xsrf, "username": name, "password": password}).encode()
        # next: the hub's home. Without it, the login would start the learner's lab.
        login = urllib.request.Request(self.url + "/hub/login?next=%2Fhub%2Fhome", data=form)
        with self.opener.open(login, timeout=60) as answer:
            assert "/hub/login" not in answer.url, f"{name} could not log in"

    def browser_cookies(self):
        return [{"name": c.name, "value": c.value, "domain": "127.0.0.1", "path": c.path or "/"}
                for c in self.jar]


def log_in_page(context, course, name, password):
    """A browser page logged in to the hub as `name`, through the hub's own login form."""
    page = context.new_page()
    page.goto(f"{course.url}/hub/login")
    page.get_by_label("Username").fill(name)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    # A learner's login goes on to their lab (the hub's spawn, up to 1 s; then its progress page).
    expect(page).not_to_have_url(re.compile(r"/hub/login"), timeout=15_000)
    return page


def landed_in_lab(page, course, name, timeout=120):
    """The learner's login has led the page to their lab's console (the hub starts a stopped lab)."""
    console_ready(page, timeout)
    assert page.url.startswith(course.lab_url(name)), page.url
