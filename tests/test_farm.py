"""The grading farm (grader/farm/): a farm broker, real grading hosts, real kills and a broker crash.

A private RabbitMQ node is the farm broker; each test has a vhost of its own
on it. The hosts grade on the session's grading broker, in the sandbox. A
host that dies is either SIGKILLed for real or, where the test needs the
death at one exact step, played by the test with the farm's own code: a
connection that takes a job and closes without acking it, as a dead host's does.
"""

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pika
import pytest

from course.grading import Grading, Jobs
from grader import farm
from grader.class_run import batch
from grader.farm import host as farm_host
from browserkit import run_apart
from farmkit import Host, collector, finished, jobs_waiting, take_a_job
from graderkit import verdicts
from labkit import HANDLERS, ROOT, processes_mentioning
from nightjar import sandbox
from nightjar.config import redact_url
from nightjar.harness.rabbitnode import PrivateNode, free_port
from nightjar.rabbitadmin import Admin

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason=f"farm hosts grade in the sandbox: {sandbox.unavailable_reason()}")

WRONG = ROOT / "tests" / "handlers"
CLASS = {"zoë": HANDLERS["unit3"], "Ana López": HANDLERS["unit2"], "李 雷": HANDLERS["starting"],
         "never_acks": WRONG / "never_acks.py", "syntax_error": WRONG / "syntax_error.py"}
TIMEOUT = "10"  # the grader's worker time limit, as in the local batch


def make_class(folder, names, handlers=CLASS):
    for name in names:
        (folder / name).mkdir(parents=True)
        shutil.copyfile(handlers[name], folder / name / "handler.py")
    return folder


@pytest.fixture(scope="module")
def farm_node():
    node = PrivateNode().start()
    try:
        node.wait_ready()
        yield node
    finally:
        node.stop()


@pytest.fixture
def farm_url(farm_node):
    """A vhost of this test's own on the farm broker, and a user for it."""
    admin = Admin(farm_node.management_url, farm_node.url)
    tenant = admin.create_tenant("farm-test")
    yield tenant.url(port=farm_node.port)
    admin.delete_tenant(tenant)


@pytest.fixture(scope="module")
def local_verdicts(grading_broker, tmp_path_factory):
    """The class graded by a local batch: what the farm must agree with."""
    folder = make_class(tmp_path_factory.mktemp("local") / "class", CLASS)
    result = subprocess.run([sys.executable, "-m", "grader", "--handlers", str(folder), "--json",
                             "--jobs", "2", "--timeout", TIMEOUT, *grading_broker.args],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    return class_verdicts(json.loads(result.stdout))


@pytest.fixture
def hosts(farm_url, grading_broker):
    """Start hosts with start(name); each is stopped (or killed) at the end of the test."""
    started = []

    def start(name):
        host = Host(farm_url, name, grading_broker, TIMEOUT)
        host.output.wait_for(r"^Connected to the farm broker")
        started.append(host)
        return host

    yield start
    for host in started:
        if host.process.poll() is None:
            host.process.kill()
            host.process.wait()


def class_verdicts(report):
    return {s["name"]: (s["status"], verdicts(s["checks"])) for s in report["submissions"]}


def test_three_hosts_grade_as_a_local_batch_and_a_killed_hosts_job_counts_once(
        farm_url, hosts, local_verdicts, tmp_path):
    folder = make_class(tmp_path / "class", CLASS)
    doomed, *others = [hosts(f"host-{n}") for n in (1, 2, 3)]
    run = collector(folder, farm_url, tmp_path, "--json")
    took = doomed.output.wait_for(r"^Took ")
    os.kill(doomed.process.pid, signal.SIGKILL)  # mid-grade: its grading takes seconds
    doomed.process.wait()
    status, out, err = finished(run)
    assert status == 1, err
    report = json.loads(out)
    assert class_verdicts(report) == local_verdicts
    assert [s["name"] for s in report["submissions"]] == sorted(CLASS, key=str.casefold)
    # The killed host's job went back to the queue and was graded, once, by another host.
    name = re.match(r"^Took '(.+)' \(job ", took).group(1)
    graded_by = {s["name"]: s["host"] for s in report["submissions"]}
    assert graded_by[name] in {"host-2", "host-3"}
    again = [line for host in others for line in host.output.lines
             if line.startswith(f"Took {name!r}") and "(again: its last host stopped)" in line]
    assert len(again) == 1, "\n".join(h.output.text() for h in others)
    assert report["farm"]["duplicates"] == 0
    # Nothing of the dead host grades on: its submission's grader ended with it.
    assert not processes_mentioning("--batch-parent", str(doomed.process.pid))
    for host in others:
        host.stop()


def test_a_result_published_by_a_host_that_died_before_acking_counts_once(
        farm_url, hosts, grading_broker, tmp_path):
    two = {"first": WRONG / "syntax_error.py", "second": WRONG / "syntax_error.py"}
    folder = make_class(tmp_path / "class", two, two)
    run = collector(folder, farm_url, tmp_path, "--json")
    # A host that grades a job, publishes its result (confirmed), and dies before its ack ...
    dying, channel, _, properties, body = take_a_job(farm_url)
    # ... while the other job is held back, so the collector still waits when the
    # dead host's job is graded again and its second result arrives.
    holding, *_ = take_a_job(farm_url)
    job = farm.read_job(body)
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "handler.py").write_bytes(job.files["handler.py"])
    options = SimpleNamespace(timeout=float(TIMEOUT), submission_timeout=120.0)
    submission = batch.grade_one(batch.Graders(), job.submission, tmp_path / "job" / "handler.py",
                                 (grading_broker.url, grading_broker.management_url), options,
                                 tmp_path / "grading", "linux")
    results = dying.channel()
    results.confirm_delivery()
    result, result_properties = farm.result_message(job.job_id, submission, "host-that-died", 1.0)
    results.basic_publish("", properties.reply_to, result, result_properties, mandatory=True)
    # And messages no host can grade: refused, each with a line, the host going on.
    channel.basic_publish(farm.JOBS, "", b"not json", pika.BasicProperties(
        reply_to=properties.reply_to, message_id="not-a-job"))
    channel.basic_publish(farm.JOBS, "", b"{}")
    dying.close()  # no ack: the job goes back to the queue

    host = hosts("host-1")
    host.output.wait_for(rf"^Took {job.submission!r} .*\(again: its last host stopped\)\.$")
    host.output.wait_for(rf"^Done {job.submission!r} ")
    holding.close()
    status, out, err = finished(run)
    report = json.loads(out)
    graded_by = {s["name"]: s["host"] for s in report["submissions"]}
    # The first result stored counts; the second for the same job is a duplicate.
    assert graded_by == {job.submission: "host-that-died",
                         ({"first", "second"} - {job.submission}).pop(): "host-1"}
    assert report["farm"]["duplicates"] == 1
    assert [s["checks"] for s in report["submissions"]] == [submission.as_dict()["checks"]] * 2
    assert "Refused a job: the job is not JSON." in host.output.lines
    assert "Refused a job: the job is from farm version None; this host reads version 1." \
        in host.output.lines
    assert err.splitlines() == ["Ignored a result for a job not in batch"
                                f" {properties.reply_to.removeprefix(farm.RESULTS_PREFIX)}:"
                                " 'not-a-job'."]
    host.stop()


def test_a_job_that_stops_every_host_that_takes_it_is_set_aside_and_reported(farm_url, tmp_path):
    folder = make_class(tmp_path / "class", ["zoë"])
    run = collector(folder, farm_url, tmp_path)
    for _ in range(farm.DELIVERY_LIMIT + 1):
        connection, *_ = take_a_job(farm_url)
        connection.close()  # as a host that dies grading it
    status, out, err = finished(run, timeout=60)
    assert status == 2
    batch_id = re.search(r"\(batch (\S+);", out).group(1)
    note = "its job was set aside after stopping 3 grading hosts that took it"
    assert out.splitlines() == [
        f"Grading 1 submission in {folder} on the grading farm at {redact_url(farm_url)}"
        f" (batch {batch_id}; each in a sandbox on a grading host)",
        f"1 of 1  zoë: NOT GRADED: {note} (0.0 s)",
        f"Farm batch {batch_id}: 1 result from 0 grading hosts (none); 0 duplicate results"
        " counted once.",
        "",
        "Submission  Result      Checks  First failing check or note",
        "-" * (len("Submission  Result      Checks  ") + len(note)),
        f"zoë         NOT GRADED  -       {note}",
        "",
        "No submission was graded; 1 not graded, so neither passed nor failed (grade them"
        " again): zoë.",
    ]
    assert err.splitlines() == ["Cannot grade: none of the 1 submissions could be graded."]


def test_a_stopped_collector_resumes_and_a_farm_broker_crash_loses_nothing(
        farm_url, farm_node, hosts, local_verdicts, tmp_path):
    names = ["zoë", "never_acks", "syntax_error"]
    folder = make_class(tmp_path / "class", names)
    first = collector(folder, farm_url, tmp_path)
    batch_id = re.search(r"\(batch (\S+);", first.out.wait_for(r"^Grading 3 submissions")).group(1)
    deadline = time.monotonic() + 30
    while jobs_waiting(farm_url) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    first.process.send_signal(signal.SIGINT)
    status, _, err = finished(first)
    assert status == 130
    assert err.strip() == (f"Collecting stopped with 0 of 3 results stored; the farm goes on"
                           f" grading. Resume with the same command and --batch {batch_id}.")

    second = collector(folder, farm_url, tmp_path, "--batch", batch_id, "--json")
    queue = farm.results_queue(batch_id)
    connection = pika.BlockingConnection(pika.URLParameters(farm_url))
    while connection.channel().queue_declare(queue, passive=True).method.consumer_count < 1:
        time.sleep(0.2)  # it publishes what it lacks before it collects: here, nothing
    connection.close()
    assert jobs_waiting(farm_url) == 3

    two = [hosts(f"host-{n}") for n in (1, 2)]
    two[0].output.wait_for(r"^Took ")
    farm_node.restart()  # killed as in a crash, then started again on its data
    status, out, err = finished(second)
    report = json.loads(out)
    assert class_verdicts(report) == {name: local_verdicts[name] for name in names}
    for host in two:
        host.output.wait_for(r"^Lost the farm broker")
        assert len([line for line in host.output.lines if line.startswith("Connected")]) == 2
        host.stop()


@pytest.mark.containers
def test_the_compose_farm_grades_as_a_local_batch(local_verdicts, tmp_path):
    """`docker compose --profile farm up --scale grader-host=2`, and the collector on this machine."""
    from nightjar.compose import V2
    from stackkit import Stack, Unavailable, cannot_run, require_engine
    require_engine()
    try:
        stack = Stack(f"nightjar-farm-test-{os.getpid()}", compose=V2)
    except Unavailable as reason:
        cannot_run(reason)
    port, password = free_port(), f"farm-{os.getpid()}"
    stack.env.update(NIGHTJAR_FARM_PORT=str(port), NIGHTJAR_FARM_PASSWORD=password)
    names = ["zoë", "syntax_error"]
    folder = make_class(tmp_path / "class", names)
    try:
        up = stack.compose("--profile", "farm", "up", "-d", "--scale", "grader-host=2",
                           "farm-broker", "grader-host")
        assert up.returncode == 0, up.stdout + up.stderr
        run = collector(folder, f"amqp://nightjar-farm:{password}@127.0.0.1:{port}/%2F", tmp_path,
                        "--json")
        status, out, err = finished(run, timeout=600)
        report = json.loads(out)
        assert class_verdicts(report) == {name: local_verdicts[name] for name in names}, err
        hosts = stack.compose("--profile", "farm", "ps", "-q", "grader-host").stdout.split()
        assert len(hosts) == 2
    finally:
        stack.compose("--profile", "farm", "down", "--volumes", "--remove-orphans", "--timeout", "5")


def test_a_host_whose_jobs_queue_is_deleted_declares_it_again_and_grades_on(
        farm_url, hosts, tmp_path):
    host = hosts("host-1")
    connection = pika.BlockingConnection(pika.URLParameters(farm_url))
    connection.channel().queue_delete(farm.JOBS)
    connection.close()
    host.output.wait_for(r"^The farm's jobs queue was deleted; declaring it again\.$", timeout=30)
    folder = make_class(tmp_path / "class", ["syntax_error"])
    status, out, err = finished(collector(folder, farm_url, tmp_path, "--json"))
    [graded] = json.loads(out)["submissions"]
    assert (status, graded["host"], graded["status"]) == (1, "host-1", "graded"), err
    host.stop()


def test_bad_input_is_refused_in_one_line(farm_node, farm_url, grading_broker, tmp_path):
    folder = make_class(tmp_path / "class", ["syntax_error"])
    wrong_login = re.sub(r"//[^:]+:[^@]+@", "//nobody:wrong@", farm_url)
    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    env = dict(os.environ, NIGHTJAR_LOCAL_VAR=str(tmp_path / "var"))

    def grader(*args):
        result = subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        return result.returncode, result.stdout, result.stderr

    assert grader("serve", "--farm", wrong_login, *grading_broker.args) == (2, "", (
        f"Cannot serve: the farm broker at {redact_url(wrong_login)} refused the login:"
        " check the user and password in the --farm URL\n"))
    assert grader("--handlers", str(folder), "--farm", closed) == (2, "", (
        f"Cannot grade: cannot reach the farm broker at {redact_url(closed)}"
        " (connection refused: is RabbitMQ running?)\n"))
    assert grader("--handlers", str(folder), "--farm", farm_url, "--batch", "gone") == (2, "", (
        f"Cannot grade: no batch gone here (it would be in {tmp_path / 'var' / 'farm' / 'gone.sqlite'})\n"))
    assert grader("--handlers", str(folder), "--farm", farm_url, "--batch", "../x")[2] == (
        "Cannot grade: a batch ID is up to 64 letters, digits, '.', '_' or '-': '../x'\n")
    status, _, err = grader("--handler", str(folder / "syntax_error" / "handler.py"), "--farm", farm_url)
    assert (status, err.splitlines()[-1]) == (
        2, "python3 -m grader: error: --farm grades a class: add --handlers DIR")


def test_a_host_takes_one_job_a_core_unless_told(monkeypatch):
    monkeypatch.setenv("NIGHTJAR_FARM_SLOTS", "")  # as compose passes it when it is not set
    assert farm_host.parse_options(["--farm", "amqp://x"]).slots == len(os.sched_getaffinity(0))
    monkeypatch.setenv("NIGHTJAR_FARM_SLOTS", "3")  # as compose passes it
    assert farm_host.parse_options(["--farm", "amqp://x"]).slots == 3
    assert farm_host.parse_options(["--farm", "amqp://x", "--slots", "1"]).slots == 1


def test_the_courses_grades_each_verdict_handed_over_once_as_soon_as_it_is_stored(
        farm_url, hosts, tmp_path):
    """course/grading.py, the course's service's Grades: one connection, one results queue."""
    handler = (WRONG / "syntax_error.py").read_bytes()
    handed = []  # what the service would keep: (learner, handler.py, Submission), as each comes

    async def until(condition, seconds=60):
        for _ in range(seconds * 10):
            if condition():
                return
            await asyncio.sleep(0.1)
        raise AssertionError("waited in vain")

    async def scenario():
        grading = Grading(farm_url, lambda *verdict: handed.append(verdict), folder=tmp_path)
        try:
            await grades_and_a_restart(grading)
        finally:
            await grading.close()

    async def grades_and_a_restart(grading):
        grades = {name: asyncio.ensure_future(grading.grade(name, handler)) for name in ("ada", "bob")}
        # A host takes one job, publishes its result (confirmed) and dies before its ack ...
        dying, channel, _, properties, body = await asyncio.to_thread(take_a_job, farm_url)
        held = farm.read_job(body)
        [other] = set(grades) - {held.submission}
        # ... while a real host grades the other: its verdict comes with the first job still out.
        host = await asyncio.to_thread(hosts, "host-1")
        graded = await grades[other]
        assert (graded.status, graded.host) == ("graded", "host-1")
        assert handed == [(other, handler, graded)] and not grades[held.submission].done()
        results = dying.channel()
        results.confirm_delivery()
        results.basic_publish("", properties.reply_to, *farm.result_message(
            held.job_id, batch.Submission(held.submission, farm.GRADED, graded.checks),
            "host-that-died", 1.0), mandatory=True)
        first = await grades[held.submission]
        assert (first.name, first.host, first.checks) == (held.submission, "host-that-died", graded.checks)
        dying.close()  # no ack: the job goes back, and its second result counts once
        await asyncio.to_thread(host.output.wait_for,
                                rf"^Took {held.submission!r} .*\(again: its last host stopped\)\.$")
        jobs = Jobs(tmp_path / "grading.sqlite")
        await until(lambda: jobs.duplicates() == 1)
        assert [learner for learner, *_ in handed] == [other, held.submission]
        # The service stops with a Grade published and not graded; started again, it keeps that
        # verdict when it comes.
        await asyncio.to_thread(host.stop)
        asyncio.ensure_future(grading.grade("carol", handler))
        await until(lambda: jobs_waiting(farm_url) == 1)
        await grading.close()
        again = Grading(farm_url, lambda *verdict: handed.append(verdict), folder=tmp_path)
        again.start()
        try:
            await asyncio.to_thread(hosts, "host-2")
            await until(lambda: len(handed) == 3)
        finally:
            await again.close()
        assert handed[2][:2] == ("carol", handler) and handed[2][2].host == "host-2"
        assert (again.verdicts, jobs.duplicates()) == (1, 1)
        jobs.close()

    run_apart(scenario())
