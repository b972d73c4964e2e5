"""The lab in real containers: `make up` under a real Docker engine, walked as a learner would.

A stack of its own (tests/stackkit.py: compose project nightjar-stack-test,
free host ports, its own passwords) is started with `make up` and removed with
its volumes and networks afterwards; the images stay, so the next run builds
from cache.

Marked `containers` (`pytest -m "not containers"` leaves it out). Skipped when
no Docker engine answers, unless NIGHTJAR_CONTAINER_TESTS=required (CI), which
makes that a failure.
"""

import os
import selectors
import subprocess
import sys
import time

import pika
import pytest

from sitekit import FormClient, answers
from stackkit import ROOT, Stack, Unavailable, run

sys.path.insert(0, str(ROOT / "scenarios"))
from units.table import UNITS  # noqa: E402  (the units' success lines)

pytestmark = pytest.mark.containers

PROJECT = "nightjar-stack-test"
LEARNER_FOLDER = "/home/labex/project/ticket-desk"
UNIT2_HANDLER = (ROOT / "scenarios/unit2-ack-after-commit/solution/handler.py").read_text()
UNIT3_HANDLER = (ROOT / "scenarios/unit3-idempotent-results/solution/handler.py").read_text()
STARTING_HANDLER = (ROOT / "ticket-desk/handler.py").read_text()


class LabStack(Stack):
    def up(self):
        started = self.make("up")
        assert (started.returncode, started.stdout, started.stderr) == (0, self.up_transcript(), ""), started
        assert answers(self.url)


@pytest.fixture(scope="module")
def stack():
    try:
        lab = LabStack(PROJECT)
    except Unavailable as reason:
        if os.environ.get("NIGHTJAR_CONTAINER_TESTS") == "required":
            pytest.fail(f"{reason} (NIGHTJAR_CONTAINER_TESTS=required)")
        pytest.skip(str(reason))
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


# Every row of a lab database, printed in the Workstation container (a new file is created as every program does).
ROWS = ("import sys\n"
        "from nightjar import db\n"
        "con = db.connect(sys.argv[1])\n"
        "print(con.execute('SELECT * FROM registrations ORDER BY id').fetchall())\n"
        "print(con.execute('SELECT * FROM tickets ORDER BY number').fetchall())\n"
        "print(con.execute('SELECT * FROM completed ORDER BY id').fetchall())\n")


def rows(stack, path="/data/nightjar.db"):
    shown = stack.workstation("python3", "-c", ROWS, path)
    assert shown.returncode == 0 and shown.stdout.count("\n") == 3, shown
    return shown.stdout


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
    # `run` would build the grader's image on first use and print the build: build it first.
    built = stack.compose("--profile", "grader", "build", "grader")
    assert built.returncode == 0, built.stdout + built.stderr
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

def test_a_learner_walks_the_lab_in_containers(stack):
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
        assert setup.returncode == 0 and setup.stdout.endswith(f" Workstation: cd {LEARNER_FOLDER}\n"), setup
        unfinished = stack.make("check-unit", f"N={n}")
        assert unfinished.returncode == 0 and unfinished.stdout.endswith(
            f"Unit {n} is not done yet. The guide: scenarios/{UNITS[n].folder}/README.md\n"), unfinished
        if n == 2:  # the learner's language goes into the container too
            in_japanese = stack.make("check-unit", f"N={n}", NIGHTJAR_LANG="ja")
            assert in_japanese.stdout.endswith(f"/{UNITS[n].folder}/README.ja.md\n"), in_japanese
        solved = stack.make("solve-unit", f"N={n}")
        assert solved.returncode == 0, solved.stdout + solved.stderr
        done = stack.make("check-unit", f"N={n}")
        assert (done.returncode, done.stdout) == (0, UNITS[n].done + "\n"), done
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
    before = rows(stack)
    down = stack.make("down")
    assert down.returncode == 0, down.stderr
    assert not answers(stack.url)
    stack.up()
    assert rows(stack) == before
    assert stack.workstation("cat", "handler.py").stdout == UNIT3_HANDLER

    # make reset, answered y: the starting handler.py and an empty lab.
    reset = stack.make("reset", input="y\n")
    assert reset.returncode == 0 and reset.stdout.endswith("Back to the start: make up\n"), reset
    stack.up()
    assert stack.workstation("cat", "handler.py").stdout == STARTING_HANDLER
    # The rows of a new database, and nothing queued.
    assert rows(stack) == rows(stack, "/tmp/new.db")
    depths = stack.workstation("python3", "-c", "from nightjar import broker, config;"
                               " print(broker.queue_depths(config.Settings.from_env()))")
    assert (depths.returncode, depths.stdout) == (0, "(0, 0)\n"), depths  # (ready, dead-lettered)
