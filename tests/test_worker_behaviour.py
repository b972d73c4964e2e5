"""worker.py beyond the walkthrough: long pauses, bad messages, errors, an unreachable broker."""

import json
import textwrap
import time

import pytest

from labkit import ticket_rows

UNREACHABLE = "amqp://guest:guest@127.0.0.1:1/%2F"


def write_handler(lab, source):
    (lab.workstation / "handler.py").write_text(textwrap.dedent(source))


def test_pause_longer_than_the_heartbeat_still_acks(lab):
    lab.extra_env["NIGHTJAR_HEARTBEAT"] = "1"
    lab.use_handler("unit3")
    registration_id = lab.register("Patient guest")
    worker = lab.start("worker.py", "--pause", "after-commit")
    worker.wait_for("Paused after-commit.")
    time.sleep(6)  # six heartbeat intervals: a blocked connection would be dropped
    assert worker.press_enter() == 0
    assert worker.lines == [f"Received {registration_id} redelivered=False",
                            "Paused after-commit.", "Handler returned."]
    assert worker.stderr == ""
    assert lab.depth() == (0, 0)
    assert lab.run("worker.py").stdout == "No ready registrations\n"
    assert ticket_rows(lab.tickets(registration_id)) == [(2, registration_id, "Patient guest")]


@pytest.mark.parametrize("input_ends", ["before the pause", "at the pause"])
def test_the_end_of_input_is_not_enter_a_pause_waits_for_ctrl_c(lab, input_ends):
    # A worker run by a script (or by `docker compose exec -T`, which passes the
    # script's input on): its input ends, and the pause still waits for a person.
    lab.use_handler("unit2")
    registration_id = lab.register("Scripted guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    if input_ends == "before the pause":
        worker.process.stdin.close()
    worker.wait_for("Paused before-write.")
    if input_ends == "at the pause":
        worker.process.stdin.close()
    time.sleep(1.5)
    assert worker.process.poll() is None  # still paused
    assert worker.interrupt() == 130
    assert worker.lines == [f"Received {registration_id} redelivered=False", "Paused before-write."]
    assert worker.stderr == ""
    assert ticket_rows(lab.tickets(registration_id)) == []
    assert lab.depth() == (1, 0)  # RabbitMQ has the delivery back


def test_malformed_messages_are_set_aside_and_the_worker_goes_on(lab):
    lab.use_handler("unit3")
    lab.publish_raw(b"not json {")
    lab.publish_raw(json.dumps({"id": "R-0002"}).encode())
    lab.publish_raw(json.dumps({"id": 7, "name": "Seven"}).encode())
    lab.publish_raw(json.dumps(["R-0002", "x"]).encode())
    registration_id = lab.register("Good guest")
    result = lab.run("worker.py")
    dlq = lab.settings.dead_letter_queue
    assert result.stdout.splitlines() == [
        f"Set aside a message that is not valid JSON; it is in the dead-letter queue {dlq}.",
        f"Set aside a message that is missing field 'name'; it is in the dead-letter queue {dlq}.",
        f"Set aside a message that is field 'id' is not a string; it is in the dead-letter queue {dlq}.",
        f"Set aside a message that is not a JSON object; it is in the dead-letter queue {dlq}.",
        f"Received {registration_id} redelivered=False",
        "Handler returned.",
    ]
    assert result.returncode == 0
    assert lab.depth() == (0, 4)
    assert ticket_rows(lab.tickets(registration_id)) == [(2, registration_id, "Good guest")]


def test_handler_that_raises_shows_the_traceback_and_does_not_ack(lab):
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            raise ValueError('oops in the handler')
        """)
    registration_id = lab.register("Error guest")
    result = lab.run("worker.py")
    assert result.returncode == 1
    assert result.stdout == f"Received {registration_id} redelivered=False\n"
    err = result.stderr.splitlines()
    assert err[0] == f"handler.py raised an error while processing {registration_id}:"
    assert err[1] == "Traceback (most recent call last):"
    assert 'handler.py", line 2, in handle' in err[2]
    assert "worker.py" not in result.stderr
    assert err[-2:] == ["ValueError: oops in the handler",
                        f"{registration_id} was not acknowledged: RabbitMQ will deliver it again."]
    assert lab.depth() == (1, 0)


def test_handler_that_raises_after_acking_says_the_job_is_gone(lab):
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            ch.basic_ack(delivery.delivery_tag)
            raise RuntimeError('disk full')
        """)
    registration_id = lab.register("Lost guest")
    result = lab.run("worker.py")
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == (
        f"{registration_id} was already acknowledged, so RabbitMQ will not deliver it again.")
    assert lab.depth() == (0, 0)


def test_handler_that_returns_without_acking_is_reported(lab):
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            with db:
                db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                           (job['id'], job['name']))
        """)
    registration_id = lab.register("Unacked guest")
    result = lab.run("worker.py", "--drain")
    assert (result.returncode, result.stdout) == (
        1, f"Received {registration_id} redelivered=False\nHandler returned.\n")
    assert result.stderr == (f"handler.py returned without acknowledging {registration_id}:"
                             " RabbitMQ will deliver it again once this worker exits.\n")
    assert lab.depth() == (1, 0)  # back in the queue once the worker exited


def test_handler_that_leaves_its_transaction_open_is_rolled_back(lab):
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
            ch.basic_ack(delivery.delivery_tag)
        """)
    registration_id = lab.register("Open guest")
    result = lab.run("worker.py")
    assert result.returncode == 1
    assert result.stderr == (f"handler.py left a transaction open, so its writes for {registration_id}"
                             " were rolled back: put them inside 'with db:'.\n")
    assert ticket_rows(lab.tickets(registration_id)) == []


def test_pause_point_never_reached_is_reported(lab):
    lab.use_handler("unit2")  # has no inside-transaction checkpoint
    registration_id = lab.register("Quick guest")
    result = lab.run("worker.py", "--pause", "inside-transaction")
    assert (result.returncode, result.stdout) == (
        1, f"Received {registration_id} redelivered=False\nHandler returned.\n")
    assert result.stderr == ("Pause point inside-transaction was never reached: handler.py has no"
                             " checkpoint(pause, 'inside-transaction') on this path.\n")


def test_misspelt_pause_point_is_refused_before_taking_a_message(lab):
    lab.register("Typo guest")
    result = lab.run("worker.py", "--pause", "before_write")
    assert result.returncode == 2
    assert "invalid choice: 'before_write'" in result.stderr
    assert lab.depth() == (1, 0)


def test_second_ack_of_one_delivery_is_refused_clearly(lab):
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            ch.basic_ack(delivery.delivery_tag)
            ch.basic_ack(delivery.delivery_tag)
        """)
    lab.register("Twice guest")
    result = lab.run("worker.py")
    assert result.returncode == 1
    assert "RuntimeError: delivery 1 was already acknowledged; acknowledging it twice would close" \
           " the channel" in result.stderr


def test_ctrl_c_while_waiting_for_a_message_exits_130_without_traceback(lab):
    lab.use_handler("unit2")
    lab.register("Calm guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    assert worker.interrupt() == 130
    assert "Traceback" not in worker.stderr


def test_unreachable_broker_is_one_clear_line(lab):
    lab.amqp_url = UNREACHABLE
    expected = ("Cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/%2F (connection refused:"
                " is RabbitMQ running?). Start the lab with 'make local' (or 'make up'), or set"
                " NIGHTJAR_AMQP_URL.\n")
    for program, args in (("worker.py", ()), ("desk.py", ("retry", "R-0001"))):
        result = lab.run(program, *args)
        assert (result.returncode, result.stdout, result.stderr) == (1, "", expected)


def test_a_message_that_keeps_failing_ends_in_the_dead_letter_queue(lab):
    from nightjar.broker import DELIVERY_LIMIT

    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            raise RuntimeError('always fails')
        """)
    registration_id = lab.register("Unlucky guest")
    for attempt in range(DELIVERY_LIMIT + 1):
        result = lab.run("worker.py")
        assert result.returncode == 1
        assert result.stdout == f"Received {registration_id} redelivered={attempt > 0}\n"
    assert lab.run("worker.py").stdout == "No ready registrations\n"
    assert lab.depth() == (0, 1)
    status = lab.run("desk.py", "status").stdout.splitlines()
    assert status[-1] == (f"Queue {lab.queue}: 0 ready, 0 unacknowledged, 1 dead-lettered"
                          f" (in {lab.settings.dead_letter_queue})")
    # Its delivery history: 21 deliveries, the earliest one no longer kept, the middle summarised.
    told = lab.run("desk.py", "history", registration_id).stdout.splitlines()
    raised = "handle() raised RuntimeError at handler.py line 2 (not acknowledged)"
    assert told[0] == f"Delivery history of {registration_id} (Unlucky guest): 21 deliveries, no ticket"
    assert [" ".join(line.split()[2:]) for line in told[1:4] + told[5:9]] == [
        f"delivery {n} redelivered=True {raised}" for n in (2, 3, 4, 18, 19, 20, 21)]
    assert told[4].startswith("…") and told[4].endswith(f": redelivered=True 13; 13 × {raised}")
    assert " deliveries 5 to 17 (13, +" in told[4]
    assert told[9:] == ["1 earlier delivery not kept: the history keeps the last 20 deliveries of"
                        " each registration and the last 1000 in all."]
