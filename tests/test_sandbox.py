"""Grading untrusted code: hostile submissions beside honest ones in one batch, in the sandbox (as root).

The hostile submissions (tests/hostile/) try what a student who wants a
better grade, or a classmate a worse one, would try: rewrite the class's
other handlers, read files outside their folder into the report, reach the
machine's own RabbitMQ, leave processes behind, edit the grader, forge the
grader's event record, and exhaust memory, processes, disk and CPU. Each is
graded (a fail with its reason) and changes nothing else: every honest
verdict is the one it gets graded alone, no file outside the sandbox
changes, no process is left, nothing reaches the machine's broker and no
secret reaches a report.
"""

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import pika
import pytest

from graderkit import WRONG, grade, verdicts
from labkit import HANDLERS, MACHINE_BROKER, ROOT, processes_mentioning
from nightjar import sandbox
from nightjar.sandbox.uids import BLOCK, BLOCKS, UID_BASE_ENV, UID_BASE as FIRST_UID

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason=f"no sandbox here: {sandbox.unavailable_reason()}")

HOSTILE = ROOT / "tests" / "hostile"
HONEST = {"solution": HANDLERS["unit3"], "acks early": HANDLERS["starting"],
          "acks after commit": HANDLERS["unit2"], "dedupes by name": WRONG / "dedupe_by_name.py"}
# The grader's usual time limit for one worker run (the spinning, forking and hoarding
# submissions wait it out).
TIMEOUT = ["--timeout", "10"]
MARKER = f"nightjar-hostile-{uuid.uuid4().hex[:8]}"
# Uids of this module's own (other gradings on the machine use theirs): the leftovers it looks for.
UID_BASE = FIRST_UID + 100_000_000 + random.randrange(1000) * BLOCK * BLOCKS
UID_ENV = {UID_BASE_ENV: str(UID_BASE)}
SECRET = f"secret-{uuid.uuid4().hex}"
GRADER_SECRET = f"grader-env-{uuid.uuid4().hex}"


def fingerprint(*folders):
    """{path: sha256} of every file below the folders (what must not change)."""
    found = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file() and ".venv" not in path.parts and "__pycache__" not in path.parts \
                    and ".git" not in path.parts:
                found[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def sandbox_processes():
    """PIDs of live processes run by the users of this module's sandboxes."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
        if UID_BASE <= uid < UID_BASE + BLOCK * BLOCKS and "State:\tZ" not in status:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def graded(grading_broker, tmp_path_factory):
    """The honest submissions graded alone, then everyone graded as one class."""
    tmp = tmp_path_factory.mktemp("hostile")
    folder = tmp / "class"
    secret = tmp / "secret.txt"
    secret.write_text(SECRET)
    for name, handler in HONEST.items():
        (folder / name).mkdir(parents=True)
        shutil.copyfile(handler, folder / name / "handler.py")
    for template in sorted(HOSTILE.glob("*.py")):
        (folder / template.stem).mkdir(parents=True)
        (folder / template.stem / "handler.py").write_text(
            template.read_text().replace("__CLASS__", str(folder)).replace("__CHECKOUT__", str(ROOT))
            .replace("__SECRET__", str(secret)).replace("__MARKER__", MARKER))
    before = fingerprint(folder, ROOT / "grader", ROOT / "nightjar", ROOT / "ticket-desk",
                         ROOT / "scenarios")
    alone = {name: grade(folder / name / "handler.py", "--skip-live", *TIMEOUT,
                         broker=grading_broker, env=dict(os.environ, **UID_ENV))[1]["checks"]
             for name in HONEST}
    scratch = tmp / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), NIGHTJAR_GRADER_TEST_SECRET=GRADER_SECRET, **UID_ENV)
    batch = subprocess.run(
        [sys.executable, "-m", "grader", "--handlers", str(folder), "--json", "--jobs", "2",
         *TIMEOUT, "--junit", str(tmp / "class.xml"), *grading_broker.args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert batch.returncode == 1, batch.stdout + batch.stderr
    after = fingerprint(folder, ROOT / "grader", ROOT / "nightjar", ROOT / "ticket-desk",
                        ROOT / "scenarios")
    report = json.loads(batch.stdout)
    return {"alone": alone, "report": report, "by_name": {s["name"]: s for s in report["submissions"]},
            "before": before, "after": after, "scratch": scratch, "batch": batch,
            "junit": (tmp / "class.xml").read_text(), "folder": folder, "secret": secret}


def test_every_honest_verdict_is_the_one_it_gets_alone(graded):
    for name in HONEST:
        assert verdicts(graded["by_name"][name]["checks"]) == verdicts(graded["alone"][name]), name
    assert {name for name in HONEST if graded["by_name"][name]["passed"]} == {"solution"}


def test_every_hostile_submission_is_graded_and_fails(graded):
    for template in HOSTILE.glob("*.py"):
        submission = graded["by_name"][template.stem]
        assert submission["status"] == "graded", submission
        assert submission["passed"] is False, template.stem


def first_failure(graded, name):
    return next(check["reason"] for check in graded["by_name"][name]["checks"] if not check["passed"])


def test_exhaustion_fails_naming_the_limit_it_hit(graded):
    assert first_failure(graded, "eats_memory") == (
        "The normal delivery of R-0002: handler.py ran into its memory limit (256 MiB a trial) in"
        " the grader's sandbox, and the worker was stopped or failed")
    assert first_failure(graded, "forks_without_end") == (
        "The normal delivery of R-0002: handler.py ran into its limit of 64 processes a trial in"
        " the grader's sandbox, and the worker was stopped or failed")
    assert first_failure(graded, "fills_the_disk") == (
        "The normal delivery of R-0002: handler.py ran into its disk space (64 MiB in all) in the"
        " grader's sandbox, and the worker was stopped or failed")
    assert first_failure(graded, "spins_the_cpu") == (
        "The normal delivery of R-0002: the worker did not finish within 10 s, so it was stopped;"
        " handler.py seems stuck (an endless loop?)")


def test_forged_events_do_not_pass_a_handler_that_never_acks(graded):
    checks = graded["by_name"]["forges_events"]["checks"]
    # Nor do they make its story claim an ack RabbitMQ never got.
    assert checks[0]["story"] == [
        "run 1  python3 worker.py: exit 0",
        "       R-0002  redelivered=False  called basic_ack  returned  but RabbitMQ still holds"
        " R-0002: it never took that ack",
        "       tickets then: R-0002 #2",
        "found  R-0002 #2; completed: R-0002; in the queue: R-0002; in the dead-letter queue:"
        " nothing",
    ]
    assert {key: checks[0][key] for key in ("name", "passed", "reason", "hint")} == {
        "name": "1. Normal delivery gives one ticket and an ack", "passed": False,
        "reason": "The normal delivery: R-0002 was not acknowledged; it went back to the queue",
        "hint": 'Revisit unit 2 "Acknowledge only completed work": end handle() with'
                " ch.basic_ack(delivery.delivery_tag), after the `with db:` block."}


def test_a_worker_finds_nothing_the_process_it_came_from_left(graded):
    """Forked from its trial's launcher, a worker holds no descriptor but its own (no pipe, Unix
    socket or namespace of the launcher's or the grader's), sees no other process, and finds
    neither the grader's environment nor an earlier run's events file in its memory."""
    checks = graded["by_name"]["looks_for_what_its_launcher_left"]["checks"]
    found = [check["reason"] for check in checks if "RuntimeError" in check["reason"]]
    assert found, checks  # (on a very busy machine a run may be stopped before it looked)
    for reason in found:
        assert "fds none; procs none; earlier 0/0; grader 0; unix 0" in reason, reason


def test_a_trigger_that_hides_duplicates_fails_every_check(graded):
    checks = graded["by_name"]["hides_duplicates_with_a_trigger"]["checks"]
    assert [check["passed"] for check in checks] == [False] * 6
    assert checks[0]["reason"] == (
        "handler.py created the trigger 'one_ticket' in the database; a trigger could change what"
        " the lab's tables seem to hold, so none is allowed")


def test_no_file_outside_the_sandbox_changed(graded):
    changed = {path for path in graded["before"].keys() | graded["after"].keys()
               if graded["before"].get(path) != graded["after"].get(path)}
    assert changed == set()
    assert list(graded["scratch"].iterdir()) == []  # and nothing was left in the batch's temp folder


def test_no_process_is_left(graded):
    assert processes_mentioning(MARKER) == []
    assert sandbox_processes() == []


def test_nothing_reached_the_machines_broker(graded):
    connection = pika.BlockingConnection(pika.URLParameters(MACHINE_BROKER))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            connection.channel().queue_declare(MARKER, passive=True)
        assert refused.value.reply_code == 404
    finally:
        connection.close()


def test_no_secret_reached_a_report(graded):
    reports = graded["batch"].stdout + graded["batch"].stderr + graded["junit"]
    for secret in (SECRET, GRADER_SECRET, "root:", "Nightjar ticket desk"):
        assert secret not in reports
    # They tried: the attempts are in the report, the contents are not.
    assert "FileNotFoundError" in first_failure(graded, "leaks_a_secret")
    ET.fromstring(graded["junit"])  # still well-formed


# ---- the Docker route: the same sandbox, as root in a container -------------------------------

DOCKER_CLASS = ("rewrites_classmates", "leaks_a_secret", "reaches_the_machines_broker",
                "leaves_processes", "eats_memory")


@pytest.mark.containers
def test_the_docker_route_grades_like_the_linux_route(graded, tmp_path):
    """As a user with a Docker engine would: the honest verdicts as graded alone, the attacks contained."""
    from stackkit import base_images, require_engine
    require_engine()
    folder = tmp_path / "class"
    for name in [*HONEST, *DOCKER_CLASS]:
        shutil.copytree(graded["folder"] / name, folder / name)
    before = fingerprint(folder, graded["secret"].parent)
    env = dict(os.environ, NIGHTJAR_GRADER_TEST_SECRET=GRADER_SECRET, **UID_ENV)
    env.update(base_images(env))
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handlers", str(folder), "--sandbox", "docker", "--json",
         "--jobs", "2", *TIMEOUT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 1, result.stdout + result.stderr
    by_name = {s["name"]: s for s in json.loads(result.stdout)["submissions"]}
    for name in HONEST:
        assert verdicts(by_name[name]["checks"]) == verdicts(graded["alone"][name]), name
    for name in DOCKER_CLASS:
        assert (by_name[name]["status"], by_name[name]["passed"]) == ("graded", False), name
    assert fingerprint(folder, graded["secret"].parent) == before
    assert SECRET not in result.stdout + result.stderr and GRADER_SECRET not in result.stdout
    assert processes_mentioning(MARKER) == [] and sandbox_processes() == []
    assert subprocess.run(["docker", "ps", "-q", "--filter", "name=nightjar-grading-"],
                          capture_output=True, text=True).stdout == ""
