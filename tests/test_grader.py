"""The grader, through real RabbitMQ brokers, real worker processes and real kills.

One private RabbitMQ node serves the whole session (passed with --amqp-url);
the end-to-end tests at the bottom let the grader start and stop its own.
"""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader import live
from labkit import HANDLERS, ROOT, processes_mentioning as _processes_mentioning
from nightjar import broker, db as database
from nightjar.config import Settings

WRONG = ROOT / "tests" / "handlers"
CORRECT = WRONG / "correct"
UNIT2 = 'unit 2 "Acknowledge only completed work"'
UNIT3 = 'unit 3 "Repeat database results safely"'
MACHINE_BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"

# Short timeouts: the endless loop is stopped sooner; the slow handler (1 s a
# ticket) must pass within a timeout it does not reach.
TIMEOUTS = {"endless_loop": ["--timeout", "2"], "correct/slow": ["--timeout", "5"]}
# name -> (handler file, extra grader options)
GRADED = {
    "starting": (HANDLERS["starting"], []),
    "unit2": (HANDLERS["unit2"], []),
    "unit3": (HANDLERS["unit3"], []),
    **{path.stem: (path, TIMEOUTS.get(path.stem, [])) for path in sorted(WRONG.glob("*.py"))},
    **{f"correct/{path.stem}": (path, TIMEOUTS.get(f"correct/{path.stem}", []))
       for path in sorted(CORRECT.glob("*.py"))},
}


def grade(handler, *options, amqp_url=None, env=None, timeout=120):
    command = [sys.executable, "-m", "grader", "--handler", str(handler), "--json", *options]
    if amqp_url:
        command += ["--amqp-url", amqp_url]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env=env)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def by_number(report):
    return {int(check["name"].split(".")[0]): check
            for check in report["checks"] if check["name"][:1].isdigit()}


def failing(report):
    return {number for number, check in by_number(report).items() if not check["passed"]}


@pytest.fixture(scope="module")
def graded(grading_broker):
    """Every handler graded once (--skip-live), two gradings at a time."""
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(grade, path, "--skip-live", *options,
                                     amqp_url=grading_broker)
                   for name, (path, options) in GRADED.items()}
        return {name: future.result() for name, future in futures.items()}


# ---- the lab's own handlers --------------------------------------------------------


def test_starting_handler_loses_the_delivery_interrupted_before_the_write(graded):
    status, report = graded["starting"]
    checks = by_number(report)
    assert status == 1 and report["passed"] is False
    assert checks[1]["passed"]
    assert not checks[2]["passed"]
    assert checks[2]["reason"] == (
        "R-0002 was lost: it was acknowledged before its ticket was written, so after Ctrl+C at"
        " checkpoint before-write RabbitMQ had nothing to deliver again; it has no ticket"
        " (one more of this check's trials failed too)")
    assert UNIT2 in checks[2]["hint"]


def test_unit2_handler_passes_1_2_3_5_and_writes_duplicates_in_4_and_6(graded):
    status, report = graded["unit2"]
    checks = by_number(report)
    assert status == 1
    assert failing(report) == {4, 6}
    assert checks[4]["reason"] == (
        "The retry after Ctrl+C at checkpoint after-commit wrote a second ticket: R-0002 has 2"
        " tickets (2, 3) (2 more of this check's trials failed too)")
    assert checks[6]["reason"] == (
        "The duplicate delivery of finished R-0002 added a ticket: R-0002 now has 2 tickets")
    assert UNIT3 in checks[4]["hint"] and UNIT3 in checks[6]["hint"]
    # Unit 2's handler has no inside-transaction checkpoint: the real-effect stop covers check 3.
    assert checks[3]["reason"] == (
        "Nothing was committed and the retry wrote one ticket, acknowledged, after: a stop just"
        " before the commit of the transaction that writes the ticket; the database refusing the"
        " write (database is locked) (handler.py has no checkpoint 'inside-transaction', so"
        " Ctrl+C there was not tried)")


def test_unit3_handler_passes_every_check(graded):
    status, report = graded["unit3"]
    assert (status, report["passed"], failing(report)) == (0, True, set())
    assert [check["hint"] for check in report["checks"]] == [""] * 6
    checks = by_number(report)
    assert checks[4]["reason"] == (
        "The redelivery wrote no second ticket and was acknowledged, after: Ctrl+C at checkpoint"
        " after-commit; a stop just after the transaction that wrote the ticket committed; a stop"
        " just before its basic_ack reached RabbitMQ")
    # Siobhán O'Neill (check 1) and the site's longest name (check 2) reached their tickets.
    assert checks[1]["reason"] == "R-0002 got one ticket and its delivery was acknowledged"
    assert checks[5]["reason"] == (
        "Three registrations all named 'Same name' got one ticket each: R-0002 in one worker run,"
        " R-0003 and R-0004 in a second run on the same database")


# ---- wrong handlers: each failed by the check that names its fault ------------------------

JAMMED = "ticket printer jammed "
HUGE = JAMMED + "x" * (200 - len(JAMMED) - len("… [shortened]")) + "… [shortened]"
TAG_KEY = ("R-0003, a later registration named 'Same name', got no ticket from a second worker"
           " run: handler.py took it as already completed, because the completed table holds"
           " '1', '2', which are not registration IDs")

WRONG_EXPECTED = {
    # handler: (failing checks, the check naming the fault, its whole reason, words of its hint)
    "completed_first": ({3}, 3, "After Ctrl+C at checkpoint inside-transaction, the completion key"
                        " of R-0002 was already committed without its ticket, so a retry would"
                        " skip it for ever (one more of this check's trials failed too)", UNIT3),
    "dedupe_by_name": ({5}, 5, "R-0003, a later registration named 'Same name', got no ticket"
                       " from a second worker run: it was treated as a repeat of R-0002", UNIT3),
    "remembers_names": ({5}, 5, "R-0004, a later registration named 'Same name', got no ticket"
                        " in the same worker run: it was treated as a repeat of R-0002 or R-0003",
                        UNIT3),
    "skip_redelivered": ({2, 3, 6}, 2, "The retry after Ctrl+C at checkpoint before-write: the"
                         " redelivery of R-0002 (redelivered=True) was acknowledged without"
                         " writing a ticket, so R-0002 has none (one more of this check's trials"
                         " failed too)", UNIT3),
    "ack_inside_transaction": ({3, 4}, 3, "R-0002 was lost: it was acknowledged before the"
                               " transaction writing its ticket committed, so after a stop just"
                               " before the commit of the transaction that writes the ticket"
                               " RabbitMQ had nothing to deliver again; it has no ticket", UNIT2),
    "swallow_errors": ({3}, 3, "The database refused the write (database is locked), yet"
                       " handler.py acknowledged R-0002 and returned normally: the delivery was"
                       " lost and R-0002 has no ticket", UNIT2),
    "never_acks": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: handler.py returned"
                   " without acknowledging the delivery, so RabbitMQ still holds it and would"
                   " deliver it again", UNIT2),
    "syntax_error": ({1, 2, 3, 4, 5, 6}, 1, "handler.py could not be loaded: IndentationError"
                     " (handler.py line 6): expected an indented block after function definition"
                     " on line 5", UNIT3),
    "endless_loop": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: the worker did not"
                     " finish within 2 s, so it was stopped; handler.py seems stuck (an endless"
                     " loop?)", UNIT3),
    "acks_wrong_tag": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: handler.py called"
                       " basic_ack with delivery tag 2, which no delivery of this worker run had,"
                       " so R-0002 was never acknowledged", UNIT2),
    "acks_twice": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: handler.py acknowledged"
                   " the delivery twice (RabbitMQ closes the channel on the second ack:"
                   " PRECONDITION_FAILED, unknown delivery tag)", UNIT2),
    # Shortcuts that only names with quotes and accents, separate worker runs and the
    # dead-letter queue expose.
    "keyed_on_delivery_tag": ({5}, 5, TAG_KEY, "delivery.delivery_tag only numbers"),
    "fstring_sql": ({1, 2}, 1, "The normal delivery of R-0002: handler.py raised"
                    " OperationalError (handler.py line 12): near \"Neill\": syntax error; the"
                    " guest's name \"Siobhán O'Neill\" holds a quote, which breaks SQL that has"
                    " the name pasted into its text", "never paste values into the SQL text"),
    "ascii_fold_name": ({1, 2}, 1, "The normal delivery wrote the ticket of R-0002 with the name"
                        " \"Siobhan O'Neill\" instead of \"Siobhán O'Neill\"",
                        "exactly as it came"),
    "nack_dead_letters": ({3}, 3, "R-0002 was dead-lettered: it was rejected with"
                          " basic_nack(requeue=False) before the transaction writing its ticket"
                          " committed, so after the database refusing the write (database is"
                          " locked) RabbitMQ moved it to the dead-letter queue instead of"
                          " delivering it again; it has no ticket", "dead-letter queue"),
    "reject_instead_of_ack": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery: handler.py settled"
                              " R-0002 with basic_reject(requeue=False) instead of acknowledging"
                              " it, so RabbitMQ moved it to the dead-letter queue, where no"
                              " worker takes it", "dead-letter queue"),
    "fake_pause": ({2, 3, 4, 6}, 2, "handler.py printed 'Paused before-write.' itself, without"
                   " calling checkpoint(pause, 'before-write'), so the interruption came at the"
                   " wrong moment", "checkpoint(pause, ...)"),
    "huge_error": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: handler.py raised"
                   f" ValueError (handler.py line 3): {HUGE}", "whole traceback"),
}


def test_every_wrong_handler_has_an_expectation():
    assert set(WRONG_EXPECTED) == {path.stem for path in WRONG.glob("*.py")}


@pytest.mark.parametrize("name", sorted(WRONG_EXPECTED))
def test_wrong_handler_is_failed_by_the_check_naming_its_fault(graded, name):
    failing_checks, number, reason, hint = WRONG_EXPECTED[name]
    status, report = graded[name]
    check = by_number(report)[number]
    assert status == 1 and report["passed"] is False
    assert failing(report) == failing_checks, report
    assert check["reason"] == reason
    assert hint in check["hint"]


def test_the_longest_name_is_shortened_in_reasons_and_marked(graded):
    """ASCII-folding the site's longest name: both names shown by their start, with lengths."""
    check = by_number(graded["ascii_fold_name"][1])[2]
    assert check["reason"] == (
        "The retry after Ctrl+C at checkpoint before-write wrote the ticket of R-0002 with the"
        " name \"ordis Asa D'Arcy-Nguyen Zoe ordis Asa D…\" instead of \"Þórdís Åsa D'Arcy-Nguyễn"
        " Zoë Þórdís Åsa…\" (77 characters instead of 80) (one more of this check's trials"
        " failed too)")


def test_reasons_and_hints_stay_within_300_characters(graded):
    for name, (_, report) in graded.items():
        for check in report["checks"]:
            assert len(check["reason"]) <= 300 and len(check["hint"]) <= 300, (name, check)
            if check["passed"]:  # a passing reason is never cut
                assert "[shortened]" not in check["reason"], (name, check)


@pytest.mark.parametrize("name", sorted(f"correct/{path.stem}" for path in CORRECT.glob("*.py")))
def test_correct_handler_passes_however_it_is_written(graded, name):
    """Select-then-insert, INSERT ... WHERE NOT EXISTS, catching IntegrityError, nack with
    requeue on an error, a slow handler, and one whose log lines sound alarming."""
    status, report = graded[name]
    assert (status, report["passed"], failing(report)) == (0, True, set()), report


def test_json_shape(graded):
    _, report = graded["unit2"]
    assert set(report) == {"passed", "checks"}
    assert isinstance(report["passed"], bool)
    assert len(report["checks"]) == 6
    for check in report["checks"]:
        assert set(check) == {"name", "passed", "reason", "hint"}
        assert isinstance(check["passed"], bool)
        assert all(isinstance(check[key], str) for key in ("name", "reason", "hint"))
        assert check["reason"] and "\n" not in check["reason"]
        assert bool(check["hint"]) is (not check["passed"])


# ---- the live results: read, never changed ---------------------------------------------


def _files(db_path):
    """sha256 of the database and of its WAL (the bytes that hold its content)."""
    return {suffix: hashlib.sha256(Path(db_path + suffix).read_bytes()).hexdigest()
            for suffix in ("", "-wal") if Path(db_path + suffix).exists()}


def _live_queue_with_one_message(queue):
    settings = Settings(MACHINE_BROKER, "unused", queue)
    connection = broker.connect(settings)
    channel = broker.open_channel(connection, settings)
    broker.publish_job(channel, settings, "R-0004", "Waiting guest")
    connection.close()
    return settings


def _drop_queue(settings):
    broker.delete_queues(settings)


def test_live_results_are_read_without_changing_the_database_or_the_queue(grading_broker, tmp_path):
    db_path = str(tmp_path / "live" / "nightjar.db")
    writer = database.connect(db_path)  # stays open: the newest rows live in the WAL only
    with writer:
        writer.execute("INSERT INTO registrations (id, name, queued_at) VALUES"
                       " ('R-0002', 'Normal guest', 'now'), ('R-0003', 'Retry guest', 'now'),"
                       " ('R-0004', 'Waiting guest', 'now')")
        writer.execute("INSERT INTO tickets (registration_id, name) VALUES ('R-0002', 'Normal"
                       " guest'), ('R-0003', 'Retry guest'), ('R-0003', 'Retry guest')")
    assert Path(db_path + "-wal").stat().st_size > 0
    before = _files(db_path)
    queue = f"test.live.{uuid.uuid4().hex[:10]}"
    settings = _live_queue_with_one_message(queue)
    try:
        env = dict(os.environ, NIGHTJAR_AMQP_URL=MACHINE_BROKER, NIGHTJAR_QUEUE=queue)
        status, report = grade(HANDLERS["unit3"], "--live-db", db_path, amqp_url=grading_broker,
                               env=env)
        assert _files(db_path) == before
        connection = broker.connect(settings)
        channel = connection.channel()
        assert broker.ready_count(channel, queue) == 1
        delivery, _, body = channel.basic_get(queue)
        # Never delivered before: the grader neither consumed nor requeued it.
        assert delivery.redelivered is False and b"R-0004" in body
        channel.basic_nack(delivery.delivery_tag, requeue=True)
        connection.close()
    finally:
        _drop_queue(settings)
        writer.close()

    assert status == 1 and report["passed"] is False
    assert all(check["passed"] for check in by_number(report).values())
    live_checks = {check["name"]: check for check in report["checks"]}
    tickets = live_checks[live.TICKETS_NAME]
    assert not tickets["passed"]
    assert "R-0003 (Retry guest): duplicate tickets (2)" in tickets["reason"]
    assert "R-0004 (Waiting guest): waiting for its ticket" in tickets["reason"]
    assert "desk.py repair" in tickets["hint"]
    waiting = live_checks[live.QUEUE_NAME]
    assert not waiting["passed"] and f"1 registration(s) wait in queue {queue}" in waiting["reason"]


def test_live_results_pass_when_every_registration_has_its_ticket(tmp_path):
    db_path = str(tmp_path / "nightjar.db")
    database.connect(db_path).close()  # closed: no WAL file left, the read-only open must cope
    before = _files(db_path)
    queue = f"test.live.{uuid.uuid4().hex[:10]}"
    settings = Settings(MACHINE_BROKER, db_path, queue)
    connection = broker.connect(settings)
    broker.declare_queues(connection.channel(), settings)
    connection.close()
    try:
        tickets, waiting = live.check(settings)
    finally:
        _drop_queue(settings)
    assert (tickets.passed, waiting.passed) == (True, True), (tickets, waiting)
    assert tickets.reason == "Every registration (1) has exactly one ticket carrying its own name"
    assert _files(db_path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nightjar.db"]  # no side files left
    # A live queue that does not exist holds nothing: it is not created by looking.
    missing = live.check_queue(Settings(MACHINE_BROKER, db_path, f"test.absent.{uuid.uuid4().hex}"))
    assert missing.passed and "does not exist" in missing.reason


def test_a_dead_lettered_live_message_is_reported_and_left_where_it_is(tmp_path):
    queue = f"test.live.{uuid.uuid4().hex[:10]}"
    settings = Settings(MACHINE_BROKER, str(tmp_path / "nightjar.db"), queue)
    connection = broker.connect(settings)
    channel = broker.open_channel(connection, settings)
    channel.basic_publish("", settings.dead_letter_queue, b'{"id": "R-0002"}', mandatory=True)
    connection.close()
    try:
        result = live.check_queue(settings)
        depths = broker.queue_depths(settings)
    finally:
        _drop_queue(settings)
    assert (result.passed, result.reason) == (
        False, f"1 message(s) were dead-lettered into {queue}.dead: RabbitMQ will not deliver"
               " them again")
    assert "desk.py retry ID" in result.hint
    assert depths == (0, 1)  # read, not consumed


def test_skip_live_queue_reads_the_database_but_never_the_broker(tmp_path):
    db_path = str(tmp_path / "nightjar.db")
    database.connect(db_path).close()
    # An unreachable live broker, as for the grader in the containers.
    settings = Settings("amqp://guest:guest@127.0.0.1:1/%2F", db_path, "test.unreachable")
    results = live.check(settings, read_queue=False)
    assert [(r.name, r.passed) for r in results] == [(live.TICKETS_NAME, True)]
    assert [(r.name, r.passed) for r in live.check(settings)] == [
        (live.TICKETS_NAME, True), (live.QUEUE_NAME, False)]


def test_missing_live_database_is_a_clear_failure(tmp_path):
    result = live.check_tickets(str(tmp_path / "nowhere.db"))
    assert not result.passed and "Cannot read the live database" in result.reason
    assert not (tmp_path / "nowhere.db").exists()


# ---- end to end: the grader's own broker ------------------------------------------------


def test_end_to_end_with_its_own_broker(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(HANDLERS["unit3"]), "--skip-live"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert "(a private RabbitMQ node, throwaway databases; live results skipped)" in lines
    assert sum(line.startswith("PASS  ") for line in lines) == 6
    assert lines[-1] == "All 6 checks passed."
    assert elapsed < 60
    # The node and every temporary file are gone.
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_stops_the_private_broker_and_the_workers(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    grader = subprocess.Popen(
        [sys.executable, "-m", "grader", "--handler", str(WRONG / "endless_loop.py"),
         "--skip-live"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True)
    scratch = f"{tmp_path}/nightjar-grader-"
    try:
        deadline = time.monotonic() + 90
        # Wait until workers spin in the endless loop (so the node is up as well).
        while not _processes_mentioning(scratch, "nightjar.harness.effects"):
            assert grader.poll() is None and time.monotonic() < deadline, grader.stderr.read()
            time.sleep(0.1)
        assert _processes_mentioning(scratch, "beam")  # the private node
        grader.send_signal(signal.SIGINT)
        _, err = grader.communicate(timeout=30)
    finally:
        if grader.poll() is None:
            os.killpg(grader.pid, signal.SIGKILL)
    assert grader.returncode == 130
    assert "Grading interrupted" in err
    time.sleep(0.2)
    assert _processes_mentioning(str(tmp_path)) == []
    assert list(tmp_path.iterdir()) == []


def test_a_killed_grader_leaves_no_broker_workers_or_files(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    grader = subprocess.Popen(
        [sys.executable, "-m", "grader", "--handler", str(WRONG / "endless_loop.py"),
         "--skip-live"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    scratch = f"{tmp_path}/nightjar-grader-"
    deadline = time.monotonic() + 90
    while not _processes_mentioning(scratch, "nightjar.harness.effects"):
        assert grader.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    grader.kill()  # SIGKILL: no finally block runs in the grader
    grader.wait()
    deadline = time.monotonic() + 10
    while _processes_mentioning(str(tmp_path)) or list(tmp_path.iterdir()):
        assert time.monotonic() < deadline, (_processes_mentioning(str(tmp_path)),
                                             list(tmp_path.iterdir()))
        time.sleep(0.1)


def test_missing_handler_is_reported_not_crashed(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(tmp_path / "handler.py"), "--skip-live",
         "--json"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["passed"] is False and "no handler.py at" in report["error"]


def test_the_grader_grades_the_workstation_folder_of_nightjar_workstation(tmp_path):
    """The handler.py the unit scripts check (NIGHTJAR_WORKSTATION), not another one."""
    folder = tmp_path / "my-desk"
    env = dict(os.environ, NIGHTJAR_WORKSTATION=str(folder))
    result = subprocess.run([sys.executable, "-m", "grader", "--skip-live", "--json"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "passed": False, "error": f"no handler.py at {folder / 'handler.py'}", "checks": []}


@pytest.mark.parametrize("case", ["checks failed", "cannot grade"])
def test_make_grade_local_names_the_graders_own_exit_status(grading_broker, tmp_path, case):
    """GNU make exits 2 for any failing recipe; the last lines keep 1 and 2 apart."""
    if case == "checks failed":
        status, args = 1, f"--handler {HANDLERS['unit2']} --amqp-url {grading_broker}"
    else:
        status, args = 2, f"--handler {tmp_path / 'handler.py'}"
    # As typed in a shell, not as a sub-make of `make test`.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    result = subprocess.run(
        ["make", "--no-print-directory", "grade-local", f"GRADE_ARGS=--skip-live {args}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    said, made = result.stderr.splitlines()[-2:]
    assert said == f"The grader exited with status {status} ({case})."
    assert re.fullmatch(rf"make: \*\*\* \[Makefile:\d+: grade-local\] Error {status}", made), made
