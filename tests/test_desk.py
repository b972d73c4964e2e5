"""desk.py on real rows: status, register, retry, and the local repair of duplicate tickets."""

from labkit import NO_MANAGEMENT_LINE, ticket_rows
from nightjar import history


def db_rows(lab):
    db = lab.db()
    try:
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in ("registrations", "tickets", "completed")}
    finally:
        db.close()


def make_duplicates(lab):
    """R-0002 processed twice by the unsafe handler; R-0003 processed once."""
    normal = lab.register("Normal guest")
    lab.run("worker.py")
    lab.run("desk.py", "retry", normal)
    other = lab.register("Other guest")
    assert lab.run("worker.py", "--drain").returncode == 0
    assert [t.number for t in lab.tickets(normal)] == [2, 3]
    return normal, other


def test_status_shows_tickets_problems_and_queue(lab):
    normal, other = make_duplicates(lab)
    lab.register("Waiting guest")
    result = lab.run("desk.py", "status")
    assert result.returncode == 0, result.stderr
    q, dlq = lab.queue, lab.settings.dead_letter_queue
    assert result.stdout.splitlines() == [
        "Registrations (4)",
        "  ID      Guest name     Tickets         Completion key",
        "  R-0001  Mina Patel     ticket 1        yes",
        "  R-0002  Normal guest   tickets 2, 3    no              ! duplicate tickets (2)",
        "  R-0003  Other guest    ticket 4        no",
        "  R-0004  Waiting guest  no ticket       no              ! waiting for its ticket",
        "2 with problems",
        f"Queue {q}: 1 ready, 0 unacknowledged, 0 dead-lettered (in {dlq})",
    ]


def test_status_counts_what_the_workers_hold_now(lab):
    """Exact at once from the delivery history; RabbitMQ's statistics lag (and need the management API)."""
    lab.use_handler("unit2")
    q, dlq = lab.queue, lab.settings.dead_letter_queue
    paused = lab.register("Paused guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    assert lab.run("desk.py", "status").stdout.splitlines()[-2:] == [
        f"Queue {q}: 0 ready, 1 unacknowledged, 0 dead-lettered (in {dlq})",
        f"  {paused} is held by worker.py (pid {worker.process.pid}), paused at before-write:"
        " not acknowledged yet"]
    worker.kill()  # killed outright: RabbitMQ has the delivery back at once, and so has status
    worker.finish()
    assert lab.comes_back()
    assert lab.run("desk.py", "status").stdout.splitlines()[-1] == (
        f"Queue {q}: 1 ready, 0 unacknowledged, 0 dead-lettered (in {dlq})")
    lab.extra_env[history.ENV] = "off"  # no history: the management API, which does not answer here
    assert lab.run("desk.py", "status").stdout.splitlines()[-2:] == [
        f"Queue {q}: 1 ready, 0 dead-lettered (in {dlq})", NO_MANAGEMENT_LINE]


def test_register_queues_through_the_site_code_path(lab):
    result = lab.run("desk.py", "register", "  Desk   guest ")
    assert (result.returncode, result.stdout) == (0, "Registered R-0002 and queued it.\n")
    assert lab.depth() == (1, 0)
    assert lab.run("worker.py").stdout == "Received R-0002 redelivered=False\nHandler returned.\n"
    assert ticket_rows(lab.tickets("R-0002")) == [(2, "R-0002", "Desk guest")]


def test_register_refuses_an_empty_name(lab):
    result = lab.run("desk.py", "register", "   ")
    assert (result.returncode, result.stderr) == (1, "Please enter a guest name.\n")
    assert db_rows(lab)["registrations"][1:] == []


def test_register_with_broker_down_saves_the_registration_as_waiting(lab):
    lab.amqp_url = "amqp://guest:guest@127.0.0.1:1/%2F"
    result = lab.run("desk.py", "register", "Patient guest")
    assert result.returncode == 1
    assert result.stdout == ("Registered R-0002, but RabbitMQ at amqp://guest:***@127.0.0.1:1/%2F"
                             " did not take it now; the site queues it once RabbitMQ is back.\n")
    assert db_rows(lab)["registrations"][1][:2] == ("R-0002", "Patient guest")
    assert db_rows(lab)["registrations"][1][3] is None


def test_retry_of_unknown_id_is_refused(lab):
    result = lab.run("desk.py", "retry", "R-0099")
    assert (result.returncode, result.stdout, result.stderr) == (
        1, "", "Unknown registration R-0099: see python3 desk.py status.\n")
    assert lab.depth() == (0, 0)


def test_repair_preview_changes_nothing(lab):
    normal, _ = make_duplicates(lab)
    lab.register("Queued guest")  # a message that repair must leave alone
    before_rows, before_bytes = db_rows(lab), open(lab.db_path, "rb").read()
    result = lab.run("desk.py", "repair", normal)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "Repair plan for R-0002 (Normal guest):",
        "  keep ticket 2 (the first original ticket)",
        "  delete extra ticket 3",
        "  record R-0002 as completed (this ID only)",
        "Nothing has changed yet. To apply this plan: python3 desk.py repair R-0002 --apply",
    ]
    assert db_rows(lab) == before_rows
    assert open(lab.db_path, "rb").read() == before_bytes
    assert lab.depth() == (1, 0)


def test_repair_apply_keeps_the_first_ticket_and_touches_nothing_else(lab):
    normal, other = make_duplicates(lab)
    lab.register("Queued guest")
    before = db_rows(lab)
    first_ticket = before["tickets"][1]
    result = lab.run("desk.py", "repair", normal, "--apply")
    assert result.returncode == 0
    assert result.stdout.splitlines()[-1] == "Applied."
    after = db_rows(lab)
    assert after["tickets"] == [t for t in before["tickets"] if t[0] != 3]
    assert first_ticket in after["tickets"]  # number and content unchanged
    assert after["registrations"] == before["registrations"]
    assert after["completed"] == [("R-0001",), ("R-0002",)]
    assert lab.depth() == (1, 0)  # the queued message is neither consumed nor acked
    again = lab.run("desk.py", "repair", normal)
    assert again.stdout.splitlines()[-1] == "Nothing to repair."


def test_repair_refusals(lab):
    lab.register("Waiting guest")  # R-0002, no ticket yet
    db = lab.db()
    with db:
        db.execute("INSERT INTO registrations (id, name) VALUES ('R-0003', 'Right name')")
        db.execute("INSERT INTO tickets (registration_id, name) VALUES ('R-0003', 'Wrong name')")
    db.close()
    before = db_rows(lab)
    cases = {
        "R-0099": "Unknown registration R-0099: see python3 desk.py status.",
        "R-0002": "R-0002 has no ticket: there is nothing to keep, so it is not repaired."
                  " Let the worker process it.",
        "R-0003": "R-0003 is registered as 'Right name' but ticket 2 carries another name;"
                  " not repaired, look at it by hand.",
    }
    for registration_id, message in cases.items():
        for extra in ((), ("--apply",)):
            result = lab.run("desk.py", "repair", registration_id, *extra)
            assert (result.returncode, result.stdout, result.stderr) == (1, "", message + "\n")
    assert db_rows(lab) == before


def test_repair_preview_names_several_extra_tickets(lab):
    normal = lab.register("Normal guest")
    lab.run("worker.py")
    lab.run("desk.py", "retry", normal)
    lab.run("desk.py", "retry", normal)
    assert lab.run("worker.py", "--drain").returncode == 0
    result = lab.run("desk.py", "repair", normal)
    assert result.stdout.splitlines()[2] == "  delete extra tickets 3, 4"
