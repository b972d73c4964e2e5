"""The delivery history (nightjar/history.py) through real workers on the real broker, and desk.py history.

Real Ctrl+C, a real SIGKILL, workers draining at once, a damaged and an
unwritable store; whole transcripts compared, with desk.py history's times
(+31.2 s) written as +<t> s.
"""

import signal
import time

from labkit import Lab, ticket_rows
from nightjar import db as database, history
from unitkit import history_times


def run(lab, *args):
    """(exit status, stdout, stderr) of a Workstation program, history times normalised."""
    result = lab.run(*args)
    return result.returncode, history_times(result.stdout), result.stderr


def ctrl_c(lab, point):
    worker = lab.start("worker.py", "--pause", point)
    worker.wait_for(f"Paused {point}.")
    assert worker.interrupt() == 130
    return worker


def test_ctrl_c_then_redelivery_told_by_desk_history(lab):
    lab.use_handler("unit2")
    retry = lab.register("Retry guest")
    ctrl_c(lab, "before-write")
    assert lab.run("worker.py").stdout == f"Received {retry} redelivered=True\nHandler returned.\n"
    normal = lab.register("Normal guest")
    assert lab.run("worker.py").returncode == 0
    store = lab.folder / "nightjar.history.jsonl"

    assert run(lab, "desk.py", "history", retry) == (0, (
        "Delivery history of R-0002 (Retry guest): 2 deliveries, ticket 2\n"
        "+<t> s  delivery 1  redelivered=False  paused at before-write  stopped by Ctrl+C (not acknowledged)\n"
        "+<t> s  delivery 2  redelivered=True   ticket 2 committed  acked\n"), "")
    assert run(lab, "desk.py", "history", normal) == (0, (
        "Delivery history of R-0003 (Normal guest): 1 delivery, ticket 3\n"
        "+<t> s  delivery 1  redelivered=False  ticket 3 committed  acked\n"), "")
    assert run(lab, "desk.py", "history") == (0, (
        "Registrations with more than one delivery or more than one ticket (1)\n"
        "  R-0002  Retry guest  2 deliveries  ticket 2\n"
        "One registration's story: python3 desk.py history R-0002\n"
        f"The delivery history ({store}) keeps the last 20 deliveries of each registration and the"
        " last 1000 in all.\n"), "")
    assert run(lab, "desk.py", "history", "r-0099") == (
        1, "", "Unknown registration r-0099: see python3 desk.py status.\n")


def test_the_seeds_worker_lines_are_the_same_with_and_without_the_history(tmp_path):
    """Two labs alike in everything but NIGHTJAR_HISTORY=off: byte-identical output."""
    outputs = []
    for name, extra in (("on", {}), ("off", {history.ENV: "off"})):
        lab = Lab(tmp_path / name)
        lab.extra_env.update(extra)
        try:
            lab.use_handler("unit3")
            first, second = lab.register("Same name"), lab.register("Same name")
            seen = []
            for point in ("inside-transaction", "after-commit"):
                worker = ctrl_c(lab, point)
                seen.append((worker.lines, worker.stderr))
            for args in (("worker.py",), ("worker.py", "--drain"), ("desk.py", "retry", first),
                         ("worker.py", "--drain")):
                result = lab.run(*args)
                seen.append((result.returncode, result.stdout, result.stderr))
            seen.append(ticket_rows(lab.tickets()))
            outputs.append(seen)
            assert (lab.folder / "nightjar.history.jsonl").exists() == (name == "on")
        finally:
            lab.cleanup()
    assert outputs[0] == outputs[1]
    assert outputs[0][2] == (0, f"Received {first} redelivered=True\nHandler returned.\n", "")
    assert outputs[0][3][1] == f"Received {second} redelivered=False\nHandler returned.\nNo ready registrations\n"


def test_a_worker_killed_mid_delivery_is_open_then_ended_without_a_word(lab):
    lab.use_handler("unit2")
    guest = lab.register("Killed guest")
    # SIGKILL right after the ticket's commit, before the ack (the effects watcher's real stop).
    killed = lab.start("worker.py", stop_at="after-commit")
    killed.finish()
    assert killed.returncode == -signal.SIGKILL
    assert run(lab, "desk.py", "history", guest) == (0, (
        "Delivery history of R-0002 (Killed guest): 1 delivery, ticket 2\n"
        "+<t> s  delivery 1  redelivered=False  ticket 2 committed  still open: no word from the worker yet\n"),
        "")
    assert lab.comes_back()
    assert lab.run("worker.py").returncode == 0
    assert run(lab, "desk.py", "history", guest)[1] == (
        "Delivery history of R-0002 (Killed guest): 2 deliveries, tickets 2, 3\n"
        "+<t> s  delivery 1  redelivered=False  ticket 2 committed  ended without a word from the"
        " worker (RabbitMQ delivered it again)\n"
        "+<t> s  delivery 2  redelivered=True   ticket 3 committed  acked\n")


def test_workers_draining_at_once_each_record_every_delivery(lab):
    lab.use_handler("unit3")
    guests = [lab.register(f"Guest {n}") for n in range(40)]
    workers = [lab.start("worker.py", "--drain") for _ in range(3)]
    assert [worker.finish(timeout=120) for worker in workers] == [0, 0, 0]
    stored = history.read(lab.folder / "nightjar.history.jsonl")
    assert stored.damaged == 0
    assert sorted(stored.deliveries) == guests
    for guest in guests:
        (delivery,) = stored.of(guest)
        assert [step["event"] for step in delivery.steps] == ["ack"]  # a plain ack ends the story
        assert delivery.steps[0]["committed"] == [t.number for t in lab.tickets(guest)]
    assert run(lab, "desk.py", "history")[1].splitlines()[0] == (
        "No registration has more than one delivery or more than one ticket.")


def test_a_damaged_store_is_read_around_and_an_unwritable_one_never_stops_the_worker(lab, tmp_path):
    lab.use_handler("unit2")
    guest = lab.register("Careful guest")
    assert lab.run("worker.py").returncode == 0
    store = lab.folder / "nightjar.history.jsonl"
    with open(store, "ab") as damaged:
        damaged.write(b'not a record\n{"id":"R-0002","delivery":"cut sh')  # a kill mid-write
    lab.deliver_again(guest)
    assert lab.run("worker.py").returncode == 0
    assert run(lab, "desk.py", "history", guest) == (0, (
        "Delivery history of R-0002 (Careful guest): 2 deliveries, tickets 2, 3\n"
        "+<t> s  delivery 1  redelivered=False  ticket 2 committed  acked\n"
        "+<t> s  delivery 2  redelivered=False  ticket 3 committed  acked\n"
        "2 damaged records in the history skipped.\n"), "")

    # A store that cannot be written (here a folder in its place): one line, once, and nothing else changes.
    lab.extra_env[history.ENV] = str(tmp_path)
    lab.register("Second guest")
    lab.register("Third guest")
    result = lab.run("worker.py", "--drain")
    assert (result.returncode, result.stdout) == (0, (
        "Received R-0003 redelivered=False\nHandler returned.\n"
        "Received R-0004 redelivered=False\nHandler returned.\nNo ready registrations\n"))
    assert result.stderr.splitlines() == [
        f"The delivery history could not be written to {tmp_path} (IsADirectoryError: [Errno 21] Is a"
        f" directory: '{tmp_path}'); deliveries go on as before, unrecorded."]
    assert run(lab, "desk.py", "history", "R-0003") == (
        1, "", f"The delivery history at {tmp_path} cannot be read (Is a directory).\n")


def fake_deliveries(store, registration_id, count, start):
    """`count` deliveries of one registration, each raising in handle(), as a failing message makes them."""
    lines = []
    for n in range(count):
        token = f"poison{n:04d}"
        at = start + n * 0.5
        lines.append(history.encode({"id": registration_id, "delivery": token, "event": "received",
                                      "time": at, "redelivered": n > 0, "after": 0, "worker": 1}))
        lines.append(history.encode({"id": registration_id, "delivery": token, "event": "raised",
                                      "time": at + 0.1, "type": "ValueError", "message": "bad",
                                      "where": "handler.py:7"}))
    history.append(store, b"".join(lines))


def test_hundreds_of_redeliveries_show_a_bounded_summary(lab):
    guest = lab.register("Poison guest")
    store = lab.folder / "nightjar.history.jsonl"
    fake_deliveries(store, guest, 300, time.time() - 200)
    assert run(lab, "desk.py", "history", guest) == (0, (
        "Delivery history of R-0002 (Poison guest): 300 deliveries, no ticket\n"
        "+<t> s  delivery 281  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "+<t> s  delivery 282  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "+<t> s  delivery 283  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "…         deliveries 284 to 296 (13, +141.5 s to +147.5 s): redelivered=True 13; 13 × handle()"
        " raised ValueError at handler.py line 7 (not acknowledged)\n"
        "+<t> s  delivery 297  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "+<t> s  delivery 298  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "+<t> s  delivery 299  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "+<t> s  delivery 300  redelivered=True   handle() raised ValueError at handler.py line 7"
        " (not acknowledged)\n"
        "280 earlier deliveries not kept: the history keeps the last 20 deliveries of each"
        " registration and the last 1000 in all.\n"), "")


def test_compaction_keeps_the_bounds_and_the_stories(tmp_path):
    store = tmp_path / "nightjar.history.jsonl"
    start = time.time() - 5000
    fake_deliveries(store, "R-0002", 50, start)
    for n in range(1100):
        fake_deliveries(store, f"R-{n + 3:04d}", 1, start + 100 + n)
    before = history.read(store, "R-0002")
    writer = history.Appender(store)
    writer.write(b"")  # another worker has the file open: the compaction waits for a later try
    assert history.compact(store) is False
    writer.close()
    assert history.compact(store) is True
    after = history.read(store)
    assert sum(len(kept) for kept in after.deliveries.values()) == history.OVERALL
    assert "R-0002" not in after.deliveries  # its deliveries were the oldest
    assert after.of("R-1102") and not after.of("R-0102")
    assert before.trimmed["R-0002"].deliveries == 30 and len(before.of("R-0002")) == 20
    assert after.damaged == 0
    # Appending goes on in the compacted file.
    history.append(store, history.encode({"id": "R-9999", "delivery": "x", "event": "received",
                                           "time": time.time(), "redelivered": False, "after": 0}))
    assert history.read(store).of("R-9999")


def test_a_new_database_starts_a_new_history_and_off_records_nothing(tmp_path):
    """make local's fresh start, or a deleted database: the old history beside it goes."""
    db_path = tmp_path / "nightjar.db"
    old = tmp_path / "nightjar.history.jsonl"
    fake_deliveries(old, "R-0002", 2, time.time())
    database.connect(str(db_path)).close()  # creates the database
    assert not old.exists()
    fake_deliveries(old, "R-0002", 2, time.time())
    database.connect(str(db_path)).close()  # an existing database keeps its history
    assert len(history.read(old).of("R-0002")) == 2
    # A unit's setup clears it, saying how many deliveries it held (not registrations).
    fake_deliveries(old, "R-0003", 3, time.time())
    assert history.clear(old) == 5 and not old.exists()
    assert history.store_path(str(db_path), {history.ENV: "off"}) is None
    assert history.store_path(str(db_path), {history.ENV: str(tmp_path / "x.jsonl")}) == tmp_path / "x.jsonl"
