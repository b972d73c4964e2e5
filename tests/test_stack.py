"""The lab in real containers: `make up` under a real Docker engine, walked as a learner would.

A stack of its own (compose project nightjar-stack-test, free host ports, its
own passwords) is started with `make up` and removed with its volumes and
networks afterwards; the images stay, so the next run builds from cache. The
base images are the ones `make base-images` builds from Debian packages
(built here when missing), unless NIGHTJAR_PYTHON_IMAGE and
NIGHTJAR_RABBITMQ_IMAGE name others.

Marked `containers` (`pytest -m "not containers"` leaves it out). Skipped when
no Docker engine answers, unless NIGHTJAR_CONTAINER_TESTS=required (CI), which
makes that a failure.
"""

import os
import secrets
import selectors
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pika
import pytest

from sitekit import FormClient, answers, free_port

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scenarios"))
import labunits  # noqa: E402  (the units' success lines)

pytestmark = pytest.mark.containers

PROJECT = "nightjar-stack-test"
BASE_IMAGES = {"NIGHTJAR_PYTHON_IMAGE": "nightjar-base/python:3.11-bookworm",
               "NIGHTJAR_RABBITMQ_IMAGE": "nightjar-base/rabbitmq:3.10-bookworm"}  # scripts/build-base-images
LEARNER_FOLDER = "/home/labex/project/ticket-desk"
UNIT2_HANDLER = (ROOT / "scenarios/unit2-ack-after-commit/solution/handler.py").read_text()
UNIT3_HANDLER = (ROOT / "scenarios/unit3-idempotent-results/solution/handler.py").read_text()
STARTING_HANDLER = (ROOT / "ticket-desk/handler.py").read_text()


def unavailable(reason):
    if os.environ.get("NIGHTJAR_CONTAINER_TESTS") == "required":
        pytest.fail(f"{reason} (NIGHTJAR_CONTAINER_TESTS=required)")
    pytest.skip(reason)


def run(command, env, input=None, timeout=600):
    return subprocess.run(command, cwd=ROOT, env=env, input=input, capture_output=True,
                          text=True, timeout=timeout)


def base_images(env):
    """The base images' settings, building the Debian ones when they are missing."""
    chosen = {name: os.environ[name] for name in BASE_IMAGES if os.environ.get(name)}
    if len(chosen) == len(BASE_IMAGES):
        return chosen
    missing = [image for image in BASE_IMAGES.values()
               if run(["docker", "image", "inspect", image], env).returncode != 0]
    if missing:
        if os.geteuid() != 0 or not shutil.which("debootstrap"):
            unavailable("the base images are missing and only root with debootstrap can build them"
                        " (sudo make base-images)")
        built = run(["scripts/build-base-images"], env, timeout=900)
        assert built.returncode == 0, built.stdout + built.stderr
    return dict(BASE_IMAGES)


class Stack:
    """make and compose with the stack's own project name, ports and passwords."""

    def __init__(self):
        if shutil.which("docker") is None or run(["docker", "info"], dict(os.environ), timeout=30).returncode:
            unavailable("no Docker engine answers ('docker info' failed); make test starts one where dockerd is installed")
        if shutil.which("docker-compose") is None:
            unavailable("docker-compose is not installed (apt-get install docker-compose)")
        self.site_port, self.amqp_port, self.management_port = free_port(), free_port(), free_port()
        self.user, self.password = "lab-" + secrets.token_hex(3), secrets.token_hex(12)
        env = {name: value for name, value in os.environ.items() if not name.startswith(("NIGHTJAR_", "COMPOSE_"))}
        env.update(COMPOSE_PROJECT_NAME=PROJECT, NIGHTJAR_SITE_PORT=str(self.site_port),
                   NIGHTJAR_AMQP_PORT=str(self.amqp_port), NIGHTJAR_MANAGEMENT_PORT=str(self.management_port),
                   NIGHTJAR_RABBITMQ_USER=self.user, NIGHTJAR_RABBITMQ_PASSWORD=self.password,
                   NIGHTJAR_GRADER_RABBITMQ_PASSWORD=secrets.token_hex(12),
                   NIGHTJAR_SECRET_KEY=secrets.token_hex(16))
        env.update(base_images(env))
        self.env = env
        self.url = f"http://127.0.0.1:{self.site_port}/"

    def make(self, *targets, input=None):
        return run(["make", "--no-print-directory", *targets], self.env, input=input)

    def compose(self, *args, input=None):
        return run(["docker-compose", *args], self.env, input=input)

    def workstation(self, *command, input=None):
        return self.compose("exec", "-T", "workstation", *command, input=input)

    def containers(self):
        listed = self.compose("--profile", "grader", "ps", "-q")
        return listed.stdout.split()

    def remove(self):
        self.compose("--profile", "grader", "down", "--volumes", "--remove-orphans", "--timeout", "5")

    def up_transcript(self):
        return ("Building the lab's images (the first build takes a few minutes)...\n"
                "Starting RabbitMQ, the site and the Workstation...\n"
                f"Nightjar site:       http://127.0.0.1:{self.site_port}/\n"
                f"RabbitMQ management: http://127.0.0.1:{self.management_port}/ (user {self.user};"
                " password: NIGHTJAR_RABBITMQ_PASSWORD in .env, default in .env.example)\n"
                "Workstation:         make shell\n")

    def up(self):
        started = self.make("up")
        assert (started.returncode, started.stdout, started.stderr) == (0, self.up_transcript(), ""), started
        assert answers(self.url)


@pytest.fixture(scope="module")
def stack():
    lab = Stack()
    lab.remove()  # what an interrupted earlier run may have left
    try:
        lab.up()
        yield lab
    finally:
        lab.remove()


def read_until(process, text, timeout=60):
    """The process's stdout up to and including the line `text` (fails after timeout)."""
    seen, deadline = b"", time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (text + "\n").encode() not in seen:
            assert time.monotonic() < deadline and process.poll() is None, (seen, process.stderr.read())
            if selector.select(timeout=1):
                seen += os.read(process.stdout.fileno(), 4096)
    return seen.decode()


def check_lines(output):
    return [line for line in output.splitlines() if line.startswith(("PASS ", "FAIL "))]


# --------------------------------------------------------------------------
# What holds for the running stack

def test_every_published_port_binds_loopback_only(stack):
    published = run(["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", *stack.containers()], stack.env)
    bindings = [line for line in published.stdout.split('"HostIp":')[1:]]
    assert len(bindings) == 3, published.stdout  # AMQP, management UI, site
    assert all(binding.startswith('"127.0.0.1"') for binding in bindings), published.stdout


def test_containers_run_as_non_root(stack):
    for container in stack.containers():
        processes = run(["docker", "top", container, "-o", "uid,pid"], stack.env).stdout.split("\n")[1:]
        uids = {line.split()[0] for line in processes if line.strip()}
        assert uids and "0" not in uids and "root" not in uids, (container, processes)


def test_the_live_broker_refuses_guest_and_takes_the_lab_user(stack):
    def connect(user, password):
        credentials = pika.PlainCredentials(user, password)
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", stack.amqp_port, credentials=credentials, connection_attempts=1))

    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        connect("guest", "guest")
    connect(stack.user, stack.password).close()


def test_the_grader_reaches_its_own_broker_but_not_the_live_one(stack):
    probe = ("import socket\n"
             "for host in ('grader-broker', 'rabbitmq'):\n"
             "    try:\n"
             "        socket.create_connection((host, 5672), timeout=3).close(); print(host, 'reachable')\n"
             "    except OSError:\n"
             "        print(host, 'unreachable')\n")
    started = stack.compose("--profile", "grader", "up", "-d", "grader-broker")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        broker = stack.compose("--profile", "grader", "ps", "-q", "grader-broker").stdout.strip()
        deadline = time.monotonic() + 120
        while run(["docker", "inspect", "-f", "{{.State.Health.Status}}", broker], stack.env).stdout.strip() != "healthy":
            assert time.monotonic() < deadline, "grader-broker never became healthy"
            time.sleep(1)
        result = stack.compose("--profile", "grader", "run", "--rm", "--no-deps", "grader", "python3", "-c", probe)
    finally:
        stack.compose("--profile", "grader", "rm", "--stop", "--force", "grader-broker")
    assert result.stdout == "grader-broker reachable\nrabbitmq unreachable\n", result


# --------------------------------------------------------------------------
# The learner's walk

def test_a_learner_walks_the_lab_in_containers(stack, tmp_path):
    # A registration through the site's form, then the learner's ack-after-commit handler.
    registration_id = FormClient(stack.url).register("Container guest")
    written = stack.workstation("sh", "-c", "cat > handler.py", input=UNIT2_HANDLER)
    assert written.returncode == 0, written.stderr

    # The worker stopped at before-write by a real SIGINT: RabbitMQ delivers it again.
    worker = subprocess.Popen(
        ["docker-compose", "exec", "-T", "workstation", "sh", "-c", "echo $$; exec python3 worker.py --pause before-write"],
        cwd=ROOT, env=stack.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        shown = read_until(worker, "Paused before-write.")
        pid, *lines = shown.splitlines()
        assert lines == [f"Received {registration_id} redelivered=False", "Paused before-write."]
        interrupted = stack.workstation("sh", "-c", f"kill -INT {int(pid)}")
        assert interrupted.returncode == 0, interrupted.stderr
        assert worker.wait(timeout=30) == 130
    finally:
        worker.kill()
        worker.wait()
    again = stack.workstation("python3", "worker.py")
    assert (again.returncode, again.stdout) == (0, f"Received {registration_id} redelivered=True\nHandler returned.\n"), again
    status, page = FormClient(stack.url).get(f"registrations/{registration_id}")
    assert status == 200 and "Open ticket" in page and "Your ticket is being prepared" not in page

    # Units 2 and 3, set up, checked and solved on the container lab.
    for n in (2, 3):
        setup = stack.make("unit", f"N={n}")
        assert setup.returncode == 0 and setup.stdout.endswith(f"Workstation: cd {LEARNER_FOLDER}\n"), setup
        unfinished = stack.make("check-unit", f"N={n}")
        assert unfinished.returncode != 0 and unfinished.stdout.endswith(
            f"Unit {n} is not done yet. The guide: scenarios/{labunits.UNITS[n].folder}/README.md\n"), unfinished
        solved = stack.make("solve-unit", f"N={n}")
        assert solved.returncode == 0, solved.stdout + solved.stderr
        done = stack.make("check-unit", f"N={n}")
        assert (done.returncode, done.stdout) == (0, labunits.UNITS[n].done + "\n"), done
    handler = stack.workstation("cat", "handler.py")
    assert handler.stdout == UNIT3_HANDLER

    # make grade grades in containers, and agrees with the local grader on the same handler.
    graded = stack.make("grade")
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert check_lines(graded.stdout) and all(line.startswith("PASS ") for line in check_lines(graded.stdout)), graded.stdout
    solution = ROOT / "scenarios/unit3-idempotent-results/solution/handler.py"
    local = run([sys.executable, "-m", "grader", "--handler", str(solution), "--skip-live"], dict(os.environ))
    assert local.returncode == 0, local.stdout + local.stderr
    assert [line for line in check_lines(graded.stdout) if "Live results" not in line] == check_lines(local.stdout)

    # make down and make up keep the learner's handler.py and the registrations.
    before = stack.workstation("python3", "desk.py", "status")
    down = stack.make("down")
    assert down.returncode == 0, down.stderr
    assert not answers(stack.url)
    stack.up()
    after = stack.workstation("python3", "desk.py", "status")
    assert (after.returncode, after.stdout) == (0, before.stdout)
    assert stack.workstation("cat", "handler.py").stdout == UNIT3_HANDLER

    # make reset, answered y: the starting handler.py and an empty lab.
    reset = stack.make("reset", input="y\n")
    assert reset.returncode == 0 and reset.stdout.endswith("Back to the start: make up\n"), reset
    stack.up()
    assert stack.workstation("cat", "handler.py").stdout == STARTING_HANDLER
    fresh = stack.workstation("python3", "desk.py", "status")
    assert fresh.returncode == 0, fresh.stderr
    # The same status as desk.py shows for a new database beside this broker's empty queue.
    amqp_url = f"amqp://{stack.user}:{stack.password}@127.0.0.1:{stack.amqp_port}/%2F"
    expected = run([sys.executable, "ticket-desk/desk.py", "status"], dict(
        os.environ, NIGHTJAR_AMQP_URL=amqp_url, NIGHTJAR_DB=str(tmp_path / "new.db"), NIGHTJAR_QUEUE="nightjar.tickets"))
    assert fresh.stdout == expected.stdout
