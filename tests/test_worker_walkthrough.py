"""The seed's Workstation walkthrough, through real worker processes on the real broker."""

from labkit import ticket_rows


def test_starting_handler_normal_run_makes_a_ticket(lab):
    registration_id = lab.register("Normal guest")
    assert registration_id == "R-0002"
    result = lab.run("worker.py")
    assert (result.returncode, result.stdout, result.stderr) == (
        0, "Received R-0002 redelivered=False\nHandler returned.\n", "")
    assert ticket_rows(lab.tickets("R-0002")) == [(2, "R-0002", "Normal guest")]
    assert lab.depth() == (0, 0)


def test_no_ready_registrations(lab):
    result = lab.run("worker.py")
    assert (result.returncode, result.stdout, result.stderr) == (0, "No ready registrations\n", "")


def test_starting_handler_loses_the_job_when_interrupted_before_write(lab):
    registration_id = lab.register("Retry guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    assert worker.interrupt() == 130
    assert worker.lines == [f"Received {registration_id} redelivered=False", "Paused before-write."]
    assert worker.stderr == ""
    # Acknowledged before the write: nothing is left for RabbitMQ to redeliver.
    assert lab.depth() == (0, 0)
    rerun = lab.run("worker.py")
    assert rerun.stdout == "No ready registrations\n"
    assert ticket_rows(lab.tickets(registration_id)) == []


def test_unit2_handler_redelivers_after_interruption_before_write(lab):
    lab.use_handler("unit2")
    registration_id = lab.register("Retry guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    assert worker.interrupt() == 130
    assert worker.stderr == ""
    assert ticket_rows(lab.tickets(registration_id)) == []
    rerun = lab.run("worker.py")
    assert (rerun.returncode, rerun.stdout) == (
        0, f"Received {registration_id} redelivered=True\nHandler returned.\n")
    assert ticket_rows(lab.tickets(registration_id)) == [(2, registration_id, "Retry guest")]
    assert lab.depth() == (0, 0)


def test_unit3_handler_rolls_back_inside_transaction(lab):
    lab.use_handler("unit3")
    first = lab.register("Same name")
    second = lab.register("Same name")
    assert (first, second) == ("R-0002", "R-0003")

    worker = lab.start("worker.py", "--pause", "inside-transaction")
    worker.wait_for("Paused inside-transaction.")
    assert worker.interrupt() == 130
    assert worker.lines == [f"Received {first} redelivered=False", "Paused inside-transaction."]
    assert ticket_rows(lab.tickets(first)) == [] and not lab.completed(first)

    worker = lab.start("worker.py", "--pause", "after-commit")
    worker.wait_for("Paused after-commit.")
    assert ticket_rows(lab.tickets(first)) == [(2, first, "Same name")] and lab.completed(first)
    assert worker.interrupt() == 130
    assert worker.lines == [f"Received {first} redelivered=True", "Paused after-commit."]

    rerun = lab.run("worker.py")
    assert rerun.stdout == f"Received {first} redelivered=True\nHandler returned.\n"
    assert ticket_rows(lab.tickets(first)) == [(2, first, "Same name")]

    drain = lab.run("worker.py", "--drain")
    assert drain.stdout == (f"Received {second} redelivered=False\nHandler returned.\n"
                            "No ready registrations\n")
    assert ticket_rows(lab.tickets(second)) == [(3, second, "Same name")]

    retry = lab.run("desk.py", "retry", first)
    assert (retry.returncode, retry.stdout) == (0, f"Queued a new delivery of {first} (Same name).\n")
    drain = lab.run("worker.py", "--drain")
    assert drain.stdout == (f"Received {first} redelivered=False\nHandler returned.\n"
                            "No ready registrations\n")
    assert ticket_rows(lab.tickets()) == [(1, "R-0001", "Mina Patel"), (2, first, "Same name"),
                             (3, second, "Same name")]
    assert lab.depth() == (0, 0)
