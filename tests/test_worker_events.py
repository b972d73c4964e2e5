"""The worker's event record (nightjar/events.py), on the machine's RabbitMQ.

Only the grader sets NIGHTJAR_EVENTS: with it set the worker appends what
happened as JSON lines, and what the learner sees on the terminal stays
exactly the same.
"""

import json
import os

import pytest

from labkit import ROOT, Lab
from nightjar import events

WRONG = ROOT / "tests" / "handlers"
GUEST = "Siobhán O'Neill"


@pytest.fixture
def twin_labs(tmp_path):
    """Two labs alike in everything but NIGHTJAR_EVENTS (set in the second only)."""
    plain, recorded = Lab(tmp_path / "plain"), Lab(tmp_path / "recorded")
    recorded.extra_env[events.ENV] = str(tmp_path / "events.jsonl")
    yield plain, recorded, tmp_path / "events.jsonl"
    plain.cleanup()
    recorded.cleanup()


def _run_both(twin_labs, handler, *args):
    plain, recorded, events_file = twin_labs
    runs = []
    for lab in (plain, recorded):
        lab.use_handler(handler)
        lab.register(GUEST)
        run = lab.run("worker.py", *args)
        # Tracebacks name the lab's own folder; nothing else may differ.
        runs.append((run.returncode, run.stdout, run.stderr.replace(str(lab.tmp), "LAB")))
    assert runs[0] == runs[1]
    return runs[1], events.read(events_file)


def test_a_normal_run_records_received_ack_returned_and_prints_the_same(twin_labs):
    (status, stdout, stderr), recorded = _run_both(twin_labs, "unit3")
    assert (status, stdout, stderr) == (0, "Received R-0002 redelivered=False\nHandler returned.\n", "")
    assert recorded == [
        {"event": "received", "id": "R-0002", "name": GUEST, "redelivered": False, "tag": 1},
        {"event": "ack", "tag": 1, "multiple": False},
        {"event": "returned", "id": "R-0002"},
    ]


def test_a_double_ack_and_the_error_it_raises_are_recorded(twin_labs):
    (status, _, _), recorded = _run_both(twin_labs, WRONG / "acks_twice.py")
    assert status == 1
    assert recorded[1:] == [
        {"event": "ack", "tag": 1, "multiple": False},
        {"event": "double-ack", "tag": 1},
        {"event": "raised", "id": "R-0002", "type": "RuntimeError",
         "message": "delivery 1 was already acknowledged; acknowledging it twice would close the"
                    " channel", "where": "handler.py:16"},  # its second basic_ack
    ]


def test_a_reject_is_recorded_with_its_requeue_flag(twin_labs):
    (status, _, _), recorded = _run_both(twin_labs, WRONG / "reject_instead_of_ack.py")
    assert status == 0
    assert recorded[1:] == [{"event": "reject", "tag": 1, "requeue": False},
                            {"event": "returned", "id": "R-0002"}]


def test_an_exception_message_is_shortened_in_the_record(lab, tmp_path):
    events_file = tmp_path / "events.jsonl"
    lab.extra_env[events.ENV] = str(events_file)
    lab.use_handler(WRONG / "huge_error.py")
    lab.register(GUEST)
    run = lab.run("worker.py")
    assert run.returncode == 1 and len(run.stderr) > 10_000_000  # the learner sees it all
    raised = events.read(events_file)[-1]
    assert raised["event"] == "raised" and raised["where"] == "handler.py:3"
    assert len(raised["message"]) == events.MESSAGE_LIMIT
    assert raised["message"].endswith(events.SHORTENED)
    assert events_file.stat().st_size < 1000


def test_shorten_marks_what_it_cut():
    assert events.shorten("short", 10) == "short"
    assert events.shorten("x" * 30, 20) == "xxxxxxx… [shortened]"
    assert events.shorten("Þórdís Åsa", 6, mark="…") == "Þórdí…"


def test_an_unreadable_line_is_kept_not_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    received = {"event": "received", "id": "R-0002", "name": "Normal guest", "redelivered": False,
                "tag": 1}
    forged = '{"event": "ack", "tag": "1", "multiple": false}'  # a tag must be a number
    path.write_text(json.dumps(received) + '\n{"event": "ack", "ta\n' + forged + "\n")
    assert events.read(path) == [received, {"event": "unreadable", "text": '{"event": "ack", "ta'},
                                 {"event": "unreadable", "text": forged}]
    assert events.read(tmp_path / "absent.jsonl") == []


def test_only_a_plain_events_file_is_read(tmp_path):
    """The file is written by the run: a link to another file or a pipe is not followed or waited on."""
    secret = tmp_path / "secret.txt"
    secret.write_text('{"event": "returned", "id": "the secret"}\n')
    (tmp_path / "link.jsonl").symlink_to(secret)
    os.mkfifo(tmp_path / "pipe.jsonl")
    assert [e["event"] for e in events.read(tmp_path / "link.jsonl")] == ["unreadable"]
    assert "secret" not in json.dumps(events.read(tmp_path / "link.jsonl"))
    assert events.read(tmp_path / "pipe.jsonl") == [
        {"event": "unreadable", "text": "the events file is not a plain file"}]


def test_a_channel_gone_before_the_ack_is_recorded(lab, tmp_path):
    events_file = tmp_path / "events.jsonl"
    lab.extra_env[events.ENV] = str(events_file)
    (lab.workstation / "handler.py").write_text(
        "def handle(ch, delivery, job, db, pause):\n"
        "    ch.close()\n"
        "    ch.basic_ack(delivery.delivery_tag)\n")
    lab.register(GUEST)
    run = lab.run("worker.py")
    assert run.returncode == 1
    kinds = [event["event"] for event in events.read(events_file)]
    assert kinds == ["received", "connection-lost", "raised"]
    lost = events.read(events_file)[1]
    assert (lost["during"], lost["type"], lost["where"]) == (
        "basic_ack", "ChannelWrongStateError", "handler.py:3")
