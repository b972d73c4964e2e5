"""Companion lessons CL-13-2 (jobs.Queue) and CL-13-3 (workflow.Delivery).

The expected output comes only from each lesson's transcript.txt, which is
the seed's "操作履歴" section copied verbatim.
"""

import dataclasses
import importlib.util
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
SEEDS = Path("/work/shared/seeds")
QUEUE_LESSON = SCENARIOS / "cl-13-2-queue-redelivery"
DELIVERY_LESSON = SCENARIOS / "cl-13-3-delivery-resume"
LESSONS = [QUEUE_LESSON, DELIVERY_LESSON]

sys.path.insert(0, str(SCENARIOS))
import lessonkit  # noqa: E402


def steps_of(lesson):
    return lessonkit.parse_transcript(lesson / "transcript.txt")


_replays = {}


def replayed(lesson):
    """Replay the whole transcript once per lesson (all steps share one namespace)."""
    if lesson not in _replays:
        steps = steps_of(lesson)
        _replays[lesson] = (steps, lessonkit.replay(lesson, steps))
    return _replays[lesson]


# ---- transcript replay -----------------------------------------------------

STEP_CASES = [
    pytest.param(lesson, step.number, id=f"{lesson.name}-step{step.number}")
    for lesson in LESSONS for step in steps_of(lesson)
]


@pytest.mark.parametrize("lesson,number", STEP_CASES)
def test_step_output_matches_transcript(lesson, number):
    steps, outputs = replayed(lesson)
    assert outputs[number - 1] == steps[number - 1].expected


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_whole_replay_reproduces_transcript_file(lesson):
    steps, outputs = replayed(lesson)
    expected = (lesson / "transcript.txt").read_text(encoding="utf-8")
    assert lessonkit.render(steps, outputs) == expected


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_transcript_file_is_the_seed_section_verbatim(lesson):
    seed = SEEDS / f"{lesson.name}.ja.txt"
    if not seed.exists():
        pytest.skip("seed document not available")
    lines = seed.read_text(encoding="utf-8").splitlines()
    start = lines.index("Python 3.15 / SQLite / 固定時計のイベント処理モデル") + 1
    end = lines.index("演習完了")
    section = "\n".join(lines[start:end]).strip("\n") + "\n"
    assert (lesson / "transcript.txt").read_text(encoding="utf-8") == section


def test_loop_body_is_the_rest_of_the_line():
    code = 'q.send("bad", -1) for attempt in range(3): m = q.receive() q.apply(m) q.advance(10)'
    assert lessonkit.to_python(code).splitlines() == [
        'q.send("bad", -1)',
        "for attempt in range(3):",
        "    m = q.receive()",
        "    q.apply(m)",
        "    q.advance(10)",
    ]


def test_statements_are_split_at_top_level_spaces_only():
    code = 'from jobs import Queue queue = Queue() queue.send("a b", 1) queue.show()'
    assert lessonkit.to_python(code).splitlines() == [
        "from jobs import Queue", "queue = Queue()", 'queue.send("a b", 1)', "queue.show()"]


# ---- the lesson scripts ----------------------------------------------------

def run_script(lesson, name):
    return subprocess.run([sys.executable, str(lesson / name)], cwd=lesson,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_scripts_are_executable_python(lesson):
    for name in ("setup", "check", "solve"):
        path = lesson / name
        assert os.access(path, os.X_OK), f"{path} is not executable"
        assert path.read_text().startswith("#!/usr/bin/env python3\n")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_check_script_passes(lesson):
    result = run_script(lesson, "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert result.stdout.startswith("OK:")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_solve_prints_the_transcript(lesson):
    result = run_script(lesson, "solve")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (lesson / "transcript.txt").read_text(encoding="utf-8")


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_setup_explains_how_to_start(lesson):
    result = run_script(lesson, "setup")
    assert result.returncode == 0
    first_import = lessonkit.to_python(steps_of(lesson)[0].code).splitlines()[0]
    short = lesson.name[:len("cl-13-2")]
    assert result.stdout.splitlines()[1:] == [
        "Start the lesson in the host's terminal, in the repository:",
        f"  cd scenarios/{lesson.name} && python3",
        f"Then type the code of each step, one line at a time, beginning with {first_import} (the guide"
        f" shows how; transcript.txt has every step). make solve-unit N={short} replays all steps,"
        f" make check-unit N={short} compares them."]


@pytest.mark.parametrize("lesson", LESSONS, ids=lambda p: p.name)
def test_check_script_reports_a_changed_line(lesson, tmp_path):
    # Copy the lesson, change the last printed line, and expect exactly one complaint.
    copy = tmp_path / "scenarios" / lesson.name
    shutil.copytree(lesson, copy, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SCENARIOS / "lessonkit.py", tmp_path / "scenarios" / "lessonkit.py")
    transcript = copy / "transcript.txt"
    lines = transcript.read_text(encoding="utf-8").splitlines()
    lines[-1] += " (changed)"
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = run_script(copy, "check")
    assert result.returncode != 0
    last = steps_of(lesson)[-1].number
    assert [line.split(":")[0] for line in result.stdout.splitlines()] == [f"step {last}"]


# ---- edge cases: jobs.Queue ------------------------------------------------

def load(lesson, module):
    """Import a lesson module from its file, fresh for every test."""
    spec = importlib.util.spec_from_file_location(f"_{module}_under_test", lesson / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def jobs():
    return load(QUEUE_LESSON, "jobs")


@pytest.fixture
def workflow():
    return load(DELIVERY_LESSON, "workflow")


def printed(capsys):
    return capsys.readouterr().out.splitlines()


def balance(queue):
    return queue.db.execute("SELECT balance FROM account").fetchone()[0]


def test_same_id_with_different_amount_is_refused(jobs, capsys):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    queue.apply(queue.receive())
    queue.advance(10)
    second = queue.receive()
    printed(capsys)
    queue.apply(dataclasses.replace(second, amount=50))
    assert printed(capsys) == ["applied=False conflict=amount_mismatch processed=100 got=50 balance=100"]
    assert balance(queue) == 100
    assert queue.db.execute("SELECT id, amount FROM processed").fetchall() == [("order-7", 100)]


def test_redelivery_with_same_amount_does_not_add_again(jobs, capsys):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    queue.apply(queue.receive())
    queue.advance(10)
    queue.apply(queue.receive())
    assert printed(capsys)[-1] == "applied=False balance=100"
    assert balance(queue) == 100


def test_stale_receipt_is_not_accepted(jobs, capsys):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    first = queue.receive()
    queue.advance(10)
    second = queue.receive()
    printed(capsys)
    queue.ack(first)
    assert printed(capsys) == ["ack=False"]
    assert queue.db.execute("SELECT state FROM jobs").fetchone()[0] == "received"
    queue.ack(second)
    assert printed(capsys) == ["ack=True"]
    assert queue.db.execute("SELECT state FROM jobs").fetchone()[0] == "done"
    queue.ack(second)          # the job is finished: nothing left to acknowledge
    assert printed(capsys) == ["ack=False"]


def test_received_job_is_hidden_until_the_timeout(jobs, capsys):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    queue.receive()
    queue.advance(9)
    assert queue.receive() is None
    assert printed(capsys)[-1] == "no_visible_message"
    queue.advance(1)
    assert queue.receive().receipt == "order-7/2"


def test_job_goes_to_dlq_after_three_failed_attempts(jobs, capsys):
    queue = jobs.Queue()
    queue.send("bad", -1)
    for _ in range(3):
        queue.apply(queue.receive())
        queue.advance(10)
    printed(capsys)
    assert queue.receive() is None
    assert printed(capsys) == ["DLQ=bad"]
    assert queue.db.execute("SELECT id, attempts, state FROM jobs").fetchall() == [("bad", 3, "dlq")]
    assert balance(queue) == 0
    queue.receive()            # the DLQ job is not delivered again
    assert printed(capsys) == ["no_visible_message"]


def test_apply_writes_id_and_balance_in_one_transaction(jobs):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    message = queue.receive()
    queue.db.execute("DROP TABLE account")   # make the balance update fail
    with pytest.raises(sqlite3.OperationalError):
        queue.apply(message)
    assert queue.db.execute("SELECT COUNT(*) FROM processed").fetchone()[0] == 0


def test_bad_input_gives_clear_errors(jobs):
    queue = jobs.Queue()
    queue.send("order-7", 100)
    with pytest.raises(TypeError, match="got None"):
        queue.apply(None)
    with pytest.raises(TypeError, match="got None"):
        queue.ack(None)
    with pytest.raises(TypeError, match="needs a Message"):
        queue.apply("order-7/1")
    with pytest.raises(ValueError, match="unknown job"):
        queue.ack(jobs.Message("ghost", 1, 1, "ghost/1"))
    with pytest.raises(ValueError, match="already on the queue"):
        queue.send("order-7", 100)
    with pytest.raises(TypeError):
        queue.send("order-8", "100")
    with pytest.raises(ValueError):
        queue.advance(-1)


def test_queue_can_live_in_a_file(jobs, tmp_path, capsys):
    path = str(tmp_path / "queue.db")
    jobs.Queue(path).send("order-7", 100)
    jobs.Queue(path).show()
    assert printed(capsys)[-2:] == ["[('order-7', 0, 'queued')]", "processed=[]"]


# ---- edge cases: workflow.Delivery ----------------------------------------

def test_publish_again_keeps_done_rows(workflow, capsys):
    flow = workflow.Delivery()
    flow.publish("order-7")
    flow.consume("billing", "order-7")
    flow.consume("mail", "order-7")
    printed(capsys)
    flow.publish("order-7")
    assert printed(capsys) == ["[('billing', 'order-7', 'done'), ('mail', 'order-7', 'done')]"]
    assert flow.db.execute("SELECT COUNT(*) FROM deliveries").fetchone()[0] == 2


def test_failed_consume_keeps_the_state(workflow, capsys):
    flow = workflow.Delivery()
    flow.publish("order-7")
    flow.consume("mail", "order-7")
    printed(capsys)
    flow.consume("mail", "order-7", fail=True)
    assert printed(capsys) == ["mail: failed; done retained"]
    state = flow.db.execute("SELECT state FROM deliveries WHERE subscriber = 'mail'").fetchone()[0]
    assert state == "done"


def test_charge_row_count_stays_one_after_repeated_runs(workflow, capsys):
    flow = workflow.Delivery()
    flow.run("job-1", ship_ok=False)
    for _ in range(3):
        flow.run("job-1", ship_ok=True)
    flow.run("job-1", ship_ok=False)   # ship already done: not re-run, not failed
    assert printed(capsys)[-2:] == ["charge=already_completed", "ship=completed"]
    assert flow.db.execute("SELECT job, amount FROM charges").fetchall() == [("job-1", 100)]
    assert flow.db.execute("SELECT COUNT(*) FROM steps").fetchone()[0] == 2
    assert flow.db.execute("SELECT COUNT(*) FROM shipments").fetchone()[0] == 1


def test_charge_and_its_step_row_commit_together(workflow):
    flow = workflow.Delivery()
    flow.db.execute("CREATE TRIGGER no_steps BEFORE INSERT ON steps"
                    " BEGIN SELECT RAISE(ABORT, 'step row refused'); END")
    with pytest.raises(sqlite3.DatabaseError):
        flow.run("job-1", ship_ok=True)
    assert flow.db.execute("SELECT COUNT(*) FROM charges").fetchone()[0] == 0


def test_delivery_bad_input_gives_clear_errors(workflow):
    flow = workflow.Delivery()
    with pytest.raises(ValueError, match="not published"):
        flow.consume("mail", "order-9")
    with pytest.raises(ValueError, match="unknown subscriber"):
        flow.consume("sms", "order-7")
    with pytest.raises(TypeError):
        flow.run("job-1", ship_ok="yes")
    with pytest.raises(ValueError):
        flow.publish("")
