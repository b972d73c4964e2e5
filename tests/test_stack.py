"""The lab in real containers: `make up` under a real Docker engine, walked as a learner would,
under both Composes (v2 `docker compose` and v1 `docker-compose`), on RabbitMQ 4.x (the
base images' 4.0 stand-in, tests/stackkit.py).

Under the project's own choice of Compose (nightjar/compose.py) the whole
walk runs; under the other one a shorter walk covers `make up`, a unit, the
Ctrl+C redelivery, `make grade`, `make down`/`make up` and `make reset`. Both
run from a bare checkout (tests/stackkit.py): no .venv, and a python3 with
only its standard library that cannot make one, as on a host with only
Docker, make and python3. Each stack has a compose project of its own, free
host ports and its own passwords, and is removed with its volumes and
networks afterwards; the images stay, so the next run builds from cache.

Marked `containers` (`pytest -m "not containers"` leaves it out). Skipped when
no Docker engine answers or a Compose is missing, unless
NIGHTJAR_CONTAINER_TESTS=required (CI), which makes that a failure.
"""

import http.client
import os
import selectors
import subprocess
import sys
import time

import pika
import pytest

from nightjar import compose as choice
from playwright.sync_api import expect

from browserkit import needs_chromium
from consolepage import expected_screen, open_console, unanswered_links, verdict_rows, wait_for_screen, walk_unit_2
from sitekit import FormClient, answers
from stackkit import ROOT, Stack, Unavailable, cannot_run, run

sys.path.insert(0, str(ROOT / "scenarios"))
from units.table import UNITS  # noqa: E402  (the units' success lines)

pytestmark = pytest.mark.containers

LEARNER_FOLDER = "/home/labex/project/ticket-desk"
UNIT2_HANDLER = (ROOT / "scenarios/unit2-ack-after-commit/solution/handler.py").read_text()
UNIT3_HANDLER = (ROOT / "scenarios/unit3-idempotent-results/solution/handler.py").read_text()
STARTING_HANDLER = (ROOT / "ticket-desk/handler.py").read_text()
GRADER_STARTS = "Starting the grader and its own RabbitMQ (they keep running for the next gradings)...\n"


def composes():
    """{"chosen": the project's choice of Compose, "other": the other one (v1 or v2)}."""
    chosen = choice.choose()
    return {"chosen": chosen, "other": list(choice.V1 if chosen == list(choice.V2) else choice.V2)}


class LabStack(Stack):
    def up(self):
        started = self.make("up")
        self.console = self.console_url()
        assert (started.returncode, started.stdout, started.stderr) == (0, self.up_transcript(self.console), ""), started
        assert answers(self.url)


@pytest.fixture(scope="module", params=["chosen", "other"])
def stack(request, tmp_path_factory):
    """The lab in containers under one Compose, run from a bare checkout; `full`: the whole walk.
    It starts as on a host with only Docker: `compose up` alone, no make and no python3."""
    try:
        lab = LabStack(f"nightjar-stack-test-{request.param}", compose=composes()[request.param],
                       bare=tmp_path_factory.mktemp(f"bare-{request.param}"))
    except Unavailable as reason:
        cannot_run(reason)
    lab.full = request.param == "chosen"
    lab.remove()  # what an interrupted earlier run may have left
    try:
        # --build: the images of this code, not those an earlier run of this checkout left
        # (compose up alone builds only images it does not have yet).
        started = lab.compose("up", "-d", "--build")
        assert started.returncode == 0, started.stdout + started.stderr
        lab.console = lab.console_url()
        deadline = time.monotonic() + 120
        while not answers(lab.url):  # `up -d` returns once the containers start, not once they serve
            assert time.monotonic() < deadline, "the site did not answer after compose up"
            time.sleep(0.5)
        yield lab
    finally:
        lab.remove()


def http_status(address, method, path, headers=None):
    """(status, headers) of one request to host:port."""
    host, port = address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request(method, path, headers=headers or {})
    answer = connection.getresponse()
    connection.close()
    return answer.status, dict(answer.getheaders())


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


def prints_nothing_for(process, seconds):
    """True when the process is still running after `seconds` and printed nothing more."""
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        return not selector.select(timeout=seconds) and process.poll() is None


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


def container_of(stack, service):
    return stack.compose("ps", "-q", service).stdout.strip()


def state(stack, service, what="{{.State.Status}}"):
    container = container_of(stack, service)
    return run(["docker", "inspect", "-f", what, container], stack.env).stdout.strip() if container else "missing"


# --------------------------------------------------------------------------
# The lab console, after `compose up` alone

@needs_chromium
def test_unit_2_in_the_browser_alone(stack, browser):
    """The seed's unit 2 in the console's page, with no host command after `compose up`."""
    context = browser.new_context()
    page = context.new_page()
    shown, prompt, registration_id, verdict = walk_unit_2(page, stack.console)
    assert shown == expected_screen(prompt, registration_id)
    assert verdict_rows(page) == [(check["name"], "PASS" if check["passed"] else "FAIL")
                                  for check in verdict["checks"]]
    assert [check["name"][:2] for check in verdict["checks"]] == ["1.", "2.", "3.", "4.", "5.", "6.", "Li"]
    assert not verdict["checks"][3]["passed"] and verdict["checks"][6]["passed"], verdict
    # Every link of the page answers, the management UI's among them (make up shows the same console).
    management = page.locator("#management-link").get_attribute("href")
    assert management == f"http://127.0.0.1:{stack.management_port}/"
    assert unanswered_links(page) == {}
    # A second tab is the same shell; the token's cookie goes with the browser.
    second = context.new_page()
    open_console(second, stack.console.split("?")[0])
    expect(second.locator("#terminal-status")).to_have_text("Connected to the Workstation: the same shell as before.")
    wait_for_screen(second, lambda lines: lines[-2:] == ["Handler returned.", prompt])
    context.close()


def test_the_console_refuses_a_missing_or_wrong_token_and_a_foreign_origin(stack):
    base = f"127.0.0.1:{stack.lab_port}"
    for path in ("/", "/?token=wrong", "/api/units"):
        status, _ = http_status(base, "GET", path)
        assert status == 403, path
    token = stack.console.split("token=")[1]
    status, headers = http_status(base, "GET", "/terminal", {
        "Authorization": f"token {token}", "Origin": "http://evil.example", "Connection": "Upgrade",
        "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert status == 403
    status, headers = http_status(base, "GET", "/terminal", {
        "Authorization": f"token {token}", "Origin": f"http://{base}", "Connection": "Upgrade",
        "Upgrade": "websocket", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
    assert status == 101  # the same request from the console's own page


def test_make_up_prints_the_console_url_of_the_running_lab(stack):
    stack.up()  # the lab `compose up` started: the same URL, first


# --------------------------------------------------------------------------
# What holds for the running stack

def test_every_published_port_binds_loopback_only(stack):
    published = run(["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", *stack.containers()], stack.env)
    bindings = [line for line in published.stdout.split('"HostIp":')[1:]]
    assert len(bindings) == 4, published.stdout  # AMQP, management UI, site, console
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
    # The grader and its broker run with the lab (the console's Grade button asks the grader).
    deadline = time.monotonic() + 120
    while state(stack, "grader-broker", "{{.State.Health.Status}}") != "healthy":
        assert time.monotonic() < deadline, "grader-broker never became healthy"
        time.sleep(1)
    result = stack.compose("exec", "-T", "grader", "python3", "-c", probe)
    assert result.stdout == "grader-broker reachable\nrabbitmq unreachable\n", result
    result = stack.compose("exec", "-T", "console", "python3", "-c", probe)
    assert result.stdout == "grader-broker unreachable\nrabbitmq unreachable\n", result


# --------------------------------------------------------------------------
# The learner's walk

def ctrl_c_at_a_pause_redelivers(stack, registration_id):
    """The worker paused through `exec -T` by a script whose input has ended, then a real SIGINT."""
    worker = stack.popen("exec", "-T", "workstation", "sh", "-c",
                         "echo $$; exec python3 worker.py --pause before-write",
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        shown = read_until(worker, "Paused before-write.")
        pid, *lines = shown.splitlines()
        assert lines == [f"Received {registration_id} redelivered=False", "Paused before-write."]
        assert prints_nothing_for(worker, 2), "the end of input ended the pause"
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


def walk_unit(stack, n):
    """make unit, check-unit (not done), solve-unit, check-unit (done): every next step names make."""
    setup = stack.make("unit", f"N={n}")
    assert setup.returncode == 0 and setup.stdout.endswith(" Workstation: make shell\n"), setup
    unfinished = stack.make("check-unit", f"N={n}")
    assert unfinished.returncode == 0 and unfinished.stdout.endswith(
        f"Unit {n} is not done yet. The guide: scenarios/{UNITS[n].folder}/README.md\n"), unfinished
    if stack.full and n == 2:  # the learner's language goes into the container too
        in_japanese = stack.make("check-unit", f"N={n}", NIGHTJAR_LANG="ja")
        assert in_japanese.stdout.endswith(f"/{UNITS[n].folder}/README.ja.md\n"), in_japanese
    if stack.full and n == 2:  # the unit's own script, run on the host: one line naming make
        refused = run(["python3", f"scenarios/{UNITS[n].folder}/check"], stack.env, cwd=stack.root)
        assert (refused.returncode, refused.stdout, refused.stderr) == (2, (
            "The lab runs in containers (make up), and this would act on the local lab:"
            f" run make check-unit N={n} in the repository instead.\n"), ""), refused
    solved = stack.make("solve-unit", f"N={n}")
    assert solved.returncode == 0 and solved.stdout.endswith(f"\nSolved. Now: make check-unit N={n}\n"), solved
    done = stack.make("check-unit", f"N={n}")
    assert (done.returncode, done.stdout) == (0, UNITS[n].done + "\n"), done


def grade(stack):
    """make grade: every check passed; one line first when it starts the grader and its broker
    (when they were stopped), none when they run with the lab. (The verdict, whether it was cold.)"""
    cold = state(stack, "grader") != "running"
    graded = stack.make("grade")
    assert (graded.returncode, graded.stderr) == (0, ""), graded
    lines = check_lines(graded.stdout)
    assert lines and all(line.startswith("PASS ") for line in lines), graded.stdout
    # The verdict, not the image's build nor Compose's own lines.
    first = (GRADER_STARTS if cold else "") + f"Grading {LEARNER_FOLDER}/handler.py\n"
    assert graded.stdout.startswith(first), graded.stdout
    assert state(stack, "grader-broker") == "running"  # kept for the next grading
    return graded.stdout, cold


def make_shell(stack):
    """`make shell` on a terminal of its own, typing pwd and exit; what the terminal showed."""
    shell = run(["script", "-qec", "make --no-print-directory shell", "/dev/null"], stack.env,
                input="pwd\nexit\n", cwd=stack.root, timeout=180)
    assert shell.returncode == 0, shell
    return shell


def test_a_learner_walks_the_lab_in_containers(stack):
    # A registration through the site's form, then the learner's ack-after-commit handler.
    registration_id = FormClient(stack.url).register("Container guest")
    written = stack.workstation("sh", "-c", "cat > handler.py", input=UNIT2_HANDLER)
    assert written.returncode == 0, written.stderr
    ctrl_c_at_a_pause_redelivers(stack, registration_id)

    # make shell: a shell in the learner's folder (on a terminal of its own).
    assert f"\n{LEARNER_FOLDER}\n" in make_shell(stack).stdout  # pwd's line

    # The units on the container lab, listed, set up, checked and solved (the short walk:
    # unit 2, then unit 3's handler typed in).
    listed = stack.make("units")
    here = run([sys.executable, "scenarios/labunits.py", "list"], dict(os.environ))
    assert (listed.returncode, listed.stdout) == (0, here.stdout) and here.returncode == 0, listed
    for n in (2, 3) if stack.full else (2,):
        walk_unit(stack, n)
    if not stack.full:
        written = stack.workstation("sh", "-c", "cat > handler.py", input=UNIT3_HANDLER)
        assert written.returncode == 0, written.stderr
    assert stack.workstation("cat", "handler.py").stdout == UNIT3_HANDLER

    # make grade grades in containers.
    graded, _cold = grade(stack)
    if stack.full:  # and agrees with the local grader on the same handler
        solution = ROOT / "scenarios/unit3-idempotent-results/solution/handler.py"
        local = run([sys.executable, "-m", "grader", "--handler", str(solution), "--skip-live"], dict(os.environ))
        assert local.returncode == 0, local.stdout + local.stderr
        assert [line for line in check_lines(graded) if "Live results" not in line] == check_lines(local.stdout)

    # make down and make up keep the learner's handler.py, the registrations and a registration
    # still queued (RabbitMQ confirmed it, so it is on disk, however quickly the broker stops).
    waiting_id = FormClient(stack.url).register("Waiting guest")
    before = rows(stack)
    down = stack.make("down")
    assert down.returncode == 0, down.stderr
    assert not answers(stack.url) and stack.containers() == []
    if stack.full:  # make shell after make down starts what the Workstation needs
        shell = make_shell(stack).stdout
        # (after the terminal's echo of what was typed ahead)
        assert "\nStarting RabbitMQ and the Workstation (make up starts the whole lab)...\n" in shell, shell
        assert f"\n{LEARNER_FOLDER}\n" in shell and not answers(stack.url)
    stack.up()
    assert rows(stack) == before
    assert stack.workstation("cat", "handler.py").stdout == UNIT3_HANDLER
    taken = stack.workstation("python3", "worker.py")
    assert (taken.returncode, taken.stdout) == (0, f"Received {waiting_id} redelivered=False\nHandler returned.\n"), taken

    # With the grader and its broker stopped, make grade starts them again.
    assert stack.compose("stop", "grader", "grader-broker").returncode == 0
    assert grade(stack)[1], "make grade found the grader running after it was stopped"

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


def test_the_host_needed_no_virtual_environment(stack):
    """Everything above ran make in a checkout without .venv, with a python3 unable to make one."""
    assert (stack.root / "Makefile").is_file() and not (stack.root / ".venv").exists()
    refused = run(["python3", "-m", "venv", str(stack.root / ".venv")], stack.env, cwd=stack.root)
    assert refused.returncode != 0 and not (stack.root / ".venv").exists()
