"""The grader's live results: the live database and queue are read, never changed.

The live queues are made on the machine's RabbitMQ; a grading run uses the
session's private node.
"""

import hashlib
import os
import uuid
from pathlib import Path

from grader.handler import live
from graderkit import by_number, grade
from labkit import HANDLERS
from nightjar import broker, db as database
from nightjar.config import Settings

MACHINE_BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"


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
        status, report = grade(HANDLERS["unit3"], "--live-db", db_path, broker=grading_broker,
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
