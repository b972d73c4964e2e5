"""The three lab units start on their own and are solvable, on the real broker.

For each unit, in an environment of its own (database, queue names and
Workstation folder): setup -> check fails with the expected lines -> solve ->
check passes. The scripts run as the learner runs them, as processes.
"""

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from unitkit import FOLDERS, ROOT, SCENARIOS, guidetext, history_times, ready_line, tickets
from unitkit import unit_env  # noqa: F401  (a fixture: a lab of the test's own)

GRADER_PRESENT = (ROOT / "grader" / "__main__.py").is_file()

SETUP = {
    1: ("Setting up Unit 1 · Follow a registration to its ticket\n"
        "Workstation <tmp>/ws/ticket-desk: created as a copy of ticket-desk/\n"
        "  handler.py: already the unit's starting version\n"
        "Database <tmp>/nightjar.db: created at the unit's start\n"
        "  R-0001  Mina Patel: ticket 1\n"
        "Queue <queue>: nothing queued\n"),
    2: ("Setting up Unit 2 · Acknowledge only finished work\n"
        "Workstation <tmp>/ws/ticket-desk: created as a copy of ticket-desk/\n"
        "  handler.py: already the unit's starting version\n"
        "Database <tmp>/nightjar.db: created at the unit's start\n"
        "  R-0001  Mina Patel: ticket 1\n"
        "  R-0002  Normal guest: ticket 2\n"
        "Queue <queue>: nothing queued\n"),
    3: ("Setting up Unit 3 · Repeat database results safely\n"
        "Workstation <tmp>/ws/ticket-desk: created as a copy of ticket-desk/\n"
        "  handler.py: replaced with the unit's starting version"
        " (unit 2's: it acknowledges after the commit)\n"
        "Database <tmp>/nightjar.db: created at the unit's start\n"
        "  R-0001  Mina Patel: ticket 1\n"
        "  R-0002  Normal guest: ticket 2\n"
        "  R-0003  Retry guest: ticket 3\n"
        "Queue <queue>: nothing queued\n"),
}

CHECK_BEFORE = {
    1: ["missing: a registration named Normal guest with one ticket",
        "missing: a registration named Lost guest with one ticket"],
    2: ["missing: a handler.py that acknowledges after the commit (interrupted at before-write,"
        " the registration was lost: RabbitMQ had nothing to deliver again)",
        "missing: a registration named Retry guest with one ticket"],
    3: ["missing: an idempotent handler.py (interrupted after the commit, the redelivery made a"
        " second ticket for the same registration)",
        "missing: two registrations named Same name, each with one ticket"],
}

CHECK_AFTER = {
    1: "Unit 1 done: Normal guest and Lost guest each have one ticket in their name, Mina Patel's"
       " ticket is intact, and nothing is waiting.\n",
    2: "Unit 2 done: handler.py acknowledges after the commit, Retry guest has one ticket,"
       " and nothing is waiting.\n",
    3: "Unit 3 done: handler.py is idempotent, both Same name registrations have one ticket each,"
       " and nothing is waiting.\n",
}

UNIT2_HANDLER = (SCENARIOS / "unit2-ack-after-commit" / "solution" / "handler.py").read_text()
UNIT3_HANDLER = (SCENARIOS / "unit3-idempotent-results" / "solution" / "handler.py").read_text()
STARTING_HANDLER = (ROOT / "ticket-desk" / "handler.py").read_text()

SOLVE = {
    1: f"""\
Solving Unit 1 · Follow a registration to its ticket, step by step, on the live lab
[Nightjar] Explore the evening -> Plan your visit -> The evening
[Nightjar] The evening: Guest name = Normal guest, Register for the evening
[Nightjar] R-0002 Normal guest: Your ticket is being prepared
[Workstation] $ pwd
<tmp>/ws/ticket-desk
[Workstation] $ cat handler.py
{STARTING_HANDLER}[Workstation] $ python3 worker.py
Received R-0002 redelivered=False
Handler returned.
[Nightjar] R-0002 Normal guest: Open ticket 2 (R-0002, Normal guest)
[Nightjar] R-0001 Mina Patel: Open ticket 1 (R-0001, Mina Patel)
[Nightjar] The evening: Guest name = Lost guest, Register for the evening
[Nightjar] R-0003 Lost guest: Your ticket is being prepared
[Workstation] $ python3 worker.py --pause before-write
Received R-0003 redelivered=False
Paused before-write.
^C
[Workstation] $ echo $?
130
[Workstation] $ python3 worker.py
No ready registrations
[Workstation] $ python3 desk.py history R-0003
Delivery history of R-0003 (Lost guest): 1 delivery, no ticket
+<t> s  delivery 1  redelivered=False  acked  paused at before-write  stopped by Ctrl+C
[Nightjar] R-0003 Lost guest: Your ticket is being prepared
[Workstation] $ python3 desk.py retry R-0003
Queued a new delivery of R-0003 (Lost guest).
[Workstation] $ python3 worker.py
Received R-0003 redelivered=False
Handler returned.
[Nightjar] R-0003 Lost guest: Open ticket 3 (R-0003, Lost guest)
Solved. Now: make check-unit N=1
""",
    2: f"""\
Solving Unit 2 · Acknowledge only finished work, step by step, on the live lab
(your handler.py is saved as <tmp>/ws/ticket-desk/.backups/handler-<stamp>.py)
[Workstation] $ cat > handler.py <<'PYTHON'
{UNIT2_HANDLER}PYTHON
[Nightjar] The evening: Guest name = Retry guest, Register for the evening
[Nightjar] R-0003 Retry guest: Your ticket is being prepared
[Workstation] $ python3 worker.py --pause before-write
Received R-0003 redelivered=False
Paused before-write.
^C
[Workstation] $ echo $?
130
[Nightjar] R-0003 Retry guest: Your ticket is being prepared
[Workstation] $ python3 worker.py
Received R-0003 redelivered=True
Handler returned.
[Nightjar] R-0003 Retry guest: Open ticket 3 (R-0003, Retry guest)
[Workstation] $ python3 desk.py history R-0003
Delivery history of R-0003 (Retry guest): 2 deliveries, ticket 3
+<t> s  delivery 1  redelivered=False  paused at before-write  stopped by Ctrl+C (not acknowledged)
+<t> s  delivery 2  redelivered=True   ticket 3 committed  acked
Solved. Now: make check-unit N=2
""",
    3: f"""\
Solving Unit 3 · Repeat database results safely, step by step, on the live lab
[Workstation] $ python3 desk.py retry R-0002
Queued a new delivery of R-0002 (Normal guest).
[Workstation] $ python3 worker.py --pause after-commit
Received R-0002 redelivered=False
Paused after-commit.
^C
[Workstation] $ echo $?
130
[Workstation] $ python3 worker.py
Received R-0002 redelivered=True
Handler returned.
[Workstation] $ python3 desk.py history R-0002
Delivery history of R-0002 (Normal guest): 2 deliveries, tickets 2, 4, 5
+<t> s  delivery 1  redelivered=False  ticket 4 committed  paused at after-commit  stopped by Ctrl+C (not acknowledged)
+<t> s  delivery 2  redelivered=True   ticket 5 committed  acked
Ticket 2: written before the first delivery in this history.
[Nightjar] R-0002 Normal guest: Open ticket 2 (R-0002, Normal guest); Open ticket 4 (R-0002, Normal guest); Open ticket 5 (R-0002, Normal guest)
(your handler.py is saved as <tmp>/ws/ticket-desk/.backups/handler-<stamp>.py)
[Workstation] $ cat > handler.py <<'PYTHON'
{UNIT3_HANDLER}PYTHON
[Nightjar] The evening: Guest name = Same name, Register for the evening
[Nightjar] R-0004 Same name: Your ticket is being prepared
[Nightjar] The evening: Guest name = Same name, Register for the evening
[Nightjar] R-0005 Same name: Your ticket is being prepared
[Workstation] $ python3 worker.py --pause inside-transaction
Received R-0004 redelivered=False
Paused inside-transaction.
^C
[Workstation] $ echo $?
130
[Nightjar] R-0004 Same name: Your ticket is being prepared
[Workstation] $ python3 desk.py status
Registrations (5)
  ID      Guest name    Tickets          Completion key
  R-0001  Mina Patel    ticket 1         yes
  R-0002  Normal guest  tickets 2, 4, 5  no              ! duplicate tickets (3)
  R-0003  Retry guest   ticket 3         no
  R-0004  Same name     no ticket        no              ! waiting for its ticket
  R-0005  Same name     no ticket        no              ! waiting for its ticket
3 with problems
Queue <queue>: 2 ready, 0 unacknowledged, 0 dead-lettered (in <queue>.dead)
[Workstation] $ python3 worker.py --pause after-commit
Received R-0004 redelivered=True
Paused after-commit.
[Nightjar] R-0004 Same name: Open ticket 6 (R-0004, Same name)
^C
[Workstation] $ echo $?
130
[Workstation] $ python3 worker.py
Received R-0004 redelivered=True
Handler returned.
[Nightjar] R-0004 Same name: Open ticket 6 (R-0004, Same name)
[Workstation] $ python3 worker.py --drain
Received R-0005 redelivered=False
Handler returned.
No ready registrations
[Nightjar] R-0005 Same name: Open ticket 7 (R-0005, Same name)
[Workstation] $ python3 desk.py status
Registrations (5)
  ID      Guest name    Tickets          Completion key
  R-0001  Mina Patel    ticket 1         yes
  R-0002  Normal guest  tickets 2, 4, 5  no              ! duplicate tickets (3)
  R-0003  Retry guest   ticket 3         no
  R-0004  Same name     ticket 6         yes
  R-0005  Same name     ticket 7         yes
1 with problems
Queue <queue>: 0 ready, 0 unacknowledged, 0 dead-lettered (in <queue>.dead)
[Workstation] $ python3 desk.py retry R-0004
Queued a new delivery of R-0004 (Same name).
[Workstation] $ python3 worker.py --drain
Received R-0004 redelivered=False
Handler returned.
No ready registrations
[Nightjar] R-0004 Same name: Open ticket 6 (R-0004, Same name)
[Nightjar] R-0005 Same name: Open ticket 7 (R-0005, Same name)
[Workstation] $ python3 desk.py repair R-0002
Repair plan for R-0002 (Normal guest):
  keep ticket 2 (the first original ticket)
  delete extra tickets 4, 5
  record R-0002 as completed (this ID only)
Nothing has changed yet. To apply this plan: python3 desk.py repair R-0002 --apply
[Workstation] $ python3 desk.py repair R-0002 --apply
Repair plan for R-0002 (Normal guest):
  keep ticket 2 (the first original ticket)
  delete extra tickets 4, 5
  record R-0002 as completed (this ID only)
Applied.
[Nightjar] R-0002 Normal guest: Open ticket 2 (R-0002, Normal guest)
Solved. Now: make check-unit N=3
""",
}


@pytest.mark.parametrize("unit", [1, 2, 3])
def test_unit_starts_on_its_own_and_is_solvable(unit, unit_env):
    assert unit_env.script(unit, "setup") == (0, SETUP[unit] + ready_line(unit))
    footer = f"Unit {unit} is not done yet. The guide: scenarios/{FOLDERS[unit]}/README.md"
    assert unit_env.script(unit, "check") == (1, "\n".join(CHECK_BEFORE[unit] + [footer]) + "\n")
    status, solved = unit_env.script(unit, "solve")
    assert (status, history_times(solved)) == (0, SOLVE[unit])
    assert unit_env.script(unit, "check") == (0, CHECK_AFTER[unit])
    if unit == 3:
        assert (unit_env.workstation / "handler.py").read_text() == UNIT3_HANDLER
        assert tickets(unit_env) == [(1, "R-0001", "Mina Patel"), (2, "R-0002", "Normal guest"),
                                     (3, "R-0003", "Retry guest"), (6, "R-0004", "Same name"),
                                     (7, "R-0005", "Same name")]


@pytest.mark.skipif(not GRADER_PRESENT, reason="the grader package (grader/__main__.py) is not present yet")
def test_grader_passes_the_handler_of_solved_unit3(unit_env, grading_broker):
    unit_env.script(3, "setup")
    assert unit_env.script(3, "solve")[0] == 0
    # The session's grading broker instead of a private node of its own
    # (the grader's own tests cover the private node; this keeps the file quick).
    result = subprocess.run([sys.executable, "-m", "grader", "--handler",
                             str(unit_env.workstation / "handler.py"), "--skip-live", "--json",
                             *grading_broker.args],
                            env=unit_env.env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    report = json.loads(result.stdout)
    assert report["passed"] is True, report
    assert result.returncode == 0


def test_setup_backs_up_the_learners_handler_and_database_and_says_what_it_resets(unit_env):
    ws = unit_env.workstation
    ws.parent.mkdir(parents=True)
    shutil.copytree(ROOT / "ticket-desk", ws)
    (ws / "handler.py").write_text("# my own work\n")
    assert unit_env.register("Left over") == "R-0002"

    status, out = unit_env.script(2, "setup")
    assert (status, out) == (0, (
        "Setting up Unit 2 · Acknowledge only finished work\n"
        "Workstation <tmp>/ws/ticket-desk:\n"
        "  handler.py: your version is saved as <tmp>/ws/ticket-desk/.backups/handler-<stamp>.py\n"
        "  handler.py: replaced with the unit's starting version"
        " (it acknowledges before writing the ticket)\n"
        "Database <tmp>/nightjar.db: reset to the unit's start (it held 2 registrations,"
        " 1 ticket and 1 completion record)\n"
        "  your copy: <tmp>/ws/ticket-desk/.backups/nightjar-<stamp>.db\n"
        "  R-0001  Mina Patel: ticket 1\n"
        "  R-0002  Normal guest: ticket 2\n"
        "Queue <queue>: removed 1 waiting message; nothing is queued now\n") + ready_line(2))

    backups = sorted((ws / ".backups").iterdir())
    assert [p.suffix for p in backups] == [".py", ".db"]
    assert backups[0].read_text() == "# my own work\n"
    copy = sqlite3.connect(backups[1])
    assert copy.execute("SELECT id, name FROM registrations ORDER BY id").fetchall() == [
        ("R-0001", "Mina Patel"), ("R-0002", "Left over")]
    copy.close()
    assert (ws / "handler.py").read_text() == STARTING_HANDLER

    # Run again: nothing left to reset, nothing more to back up.
    status, out = unit_env.script(2, "setup")
    assert status == 0
    assert "  handler.py: already the unit's starting version\n" in out
    assert "Database <tmp>/nightjar.db: already at the unit's start\n" in out
    assert len(list((ws / ".backups").iterdir())) == 2


def test_check_names_waiting_registrations_and_messages(unit_env):
    unit_env.script(1, "setup")
    unit_env.register("Normal guest")
    assert unit_env.script(1, "check") == (1, (
        "missing: a registration named Normal guest with one ticket\n"
        "missing: a registration named Lost guest with one ticket\n"
        "problem: R-0002 (Normal guest) waiting for its ticket\n"
        "missing: an empty queue (1 message still waiting in <queue>: python3 worker.py --drain)\n"
        "Unit 1 is not done yet. The guide: scenarios/unit1-trace-registration/README.md\n"))


def test_unit3_check_refuses_the_starting_handler(unit_env):
    unit_env.script(3, "setup")
    (unit_env.workstation / "handler.py").write_text(STARTING_HANDLER)
    status, out = unit_env.script(3, "check")
    assert status == 1
    assert out.splitlines()[0] == (
        "missing: a handler.py that acknowledges after the commit (interrupted at after-commit,"
        " the delivery did not come back)")


def test_the_lab_lists_every_unit_and_companion_lesson():
    result = subprocess.run([sys.executable, str(SCENARIOS / "labunits.py"), "list"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    for folder in (*FOLDERS.values(), "cl-13-2-queue-redelivery", "cl-13-3-delivery-resume"):
        assert f"scenarios/{folder}/" in result.stdout
    for n in ("N=1", "N=2", "N=3", "N=cl-13-2", "N=cl-13-3"):
        assert n in result.stdout


def test_unit2_check_shows_the_workers_own_error(unit_env):
    unit_env.script(2, "setup")
    (unit_env.workstation / "handler.py").write_text("def handle(ch, delivery, job, db, pause)\n    pass\n")
    status, out = unit_env.script(2, "check")
    assert status == 1
    assert out.splitlines()[0] == (
        "missing: a handler.py with checkpoint(pause, 'before-write') before the write"
        " (python3 worker.py --pause before-write: handler.py could not be loaded: SyntaxError in"
        " handler.py, line 1: expected ':'. Fix it and run the worker again.)")


@pytest.mark.parametrize("folder", ["unit2-ack-after-commit", "unit3-idempotent-results"])
@pytest.mark.parametrize("guide", ["README.md", "README.ja.md"])
def test_the_guides_paste_exactly_the_solution_handler(folder, guide):
    """The here-document a learner pastes is the reference solution, to the byte."""
    text = (ROOT / "scenarios" / folder / guide).read_text(encoding="utf-8")
    block = re.search(r"^( *)cat > handler.py <<'PYTHON'\n(.*?)^\1PYTHON$", text, re.S | re.M)
    assert block, f"{guide} has no cat > handler.py here-document"
    indent = block.group(1)
    pasted = "".join(line[len(indent):] if line.strip() else "\n"
                     for line in block.group(2).splitlines(keepends=True))
    assert pasted == (ROOT / "scenarios" / folder / "solution" / "handler.py").read_text()


@pytest.mark.parametrize("folder", ["unit2-ack-after-commit", "unit3-idempotent-results"])
@pytest.mark.parametrize("guide", ["README.md", "README.ja.md"])
def test_the_here_document_pasted_from_the_printed_guide_ends_and_writes_the_solution(
        folder, guide, tmp_path):
    """Copy the block as `make unit` printed it, paste it into bash: the here-document ends."""
    printed = guidetext.as_plain_text((SCENARIOS / folder / guide).read_text(encoding="utf-8"))
    block = re.search(r"^cat > handler.py <<'PYTHON'\n.*?^PYTHON\n", printed, re.S | re.M)
    assert block, f"the printed {guide} has no here-document starting at the first column"
    shell = subprocess.run(["bash", "-i"], input=block.group(0) + "echo pasted $?\n", cwd=tmp_path,
                           capture_output=True, text=True, timeout=30)
    assert shell.stdout.splitlines()[-1] == "pasted 0"
    assert (tmp_path / "handler.py").read_text() == (SCENARIOS / folder / "solution" / "handler.py").read_text()


def test_setup_shows_the_guide_in_the_learners_language(unit_env):
    assert unit_env.script(1, "setup", LANG="ja_JP.UTF-8") == (0, (
        "単元1 · 登録から入場券までを追う を準備します\n"
        "Workstation <tmp>/ws/ticket-desk: ticket-desk/ のコピーとして作成しました\n"
        "  handler.py: すでにこの単元の開始時の版です\n"
        "データベース <tmp>/nightjar.db: この単元の開始状態で作成しました\n"
        "  R-0001  Mina Patel: 券 1\n"
        "キュー <queue>: 空です\n") + ready_line(1, "ja"))
    status, out = unit_env.script(1, "setup", LANG="ja_JP.UTF-8", NIGHTJAR_LANG="en")
    assert (status, out.split("Database ")[1:]) == (0, [
        "<tmp>/nightjar.db: already at the unit's start\n"
        "  R-0001  Mina Patel: ticket 1\n"
        "Queue <queue>: nothing queued\n" + ready_line(1, "en")])


def test_setup_refuses_an_unknown_language_before_changing_anything(unit_env):
    assert unit_env.script(1, "setup", NIGHTJAR_LANG="fr") == (
        2, "setup stopped: NIGHTJAR_LANG must be ja or en, not 'fr'.\n")
    assert not Path(unit_env.db_path).exists() and not unit_env.workstation.exists()


def test_make_check_unit_answers_not_done_yet_without_failing(unit_env):
    """labunits.py check (what make check-unit runs) exits 0 with the same lines ./check prints."""
    unit_env.script(1, "setup")
    status, out = unit_env.script(1, "check")
    result = subprocess.run([sys.executable, str(SCENARIOS / "labunits.py"), "check", "1"],
                            env=unit_env.env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert (status, result.returncode, unit_env.normalise(result.stdout)) == (1, 0, out)
    assert out.endswith("Unit 1 is not done yet. The guide: scenarios/unit1-trace-registration/README.md\n")
