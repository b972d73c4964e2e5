"""The grader's verdicts on handlers: the lab's own, wrong ones, correct ones, and its JSON shape.

Every handler is graded once (--skip-live) on the session's private RabbitMQ
node, passed with --amqp-url. tests/test_grader_live.py tests the live results
and tests/test_grader_cli.py the grader end to end with a broker of its own.
"""

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from graderkit import WRONG, by_number, grade, verdicts
from grader.handler import trial_story
from labkit import HANDLERS
from nightjar import sandbox

CORRECT = WRONG / "correct"
UNIT2 = 'unit 2 "Acknowledge only completed work"'
UNIT3 = 'unit 3 "Repeat database results safely"'

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


def failing(report):
    return {number for number, check in by_number(report).items() if not check["passed"]}


@pytest.fixture(scope="module")
def graded(grading_broker):
    """Every handler graded once (--skip-live), two gradings at a time."""
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(grade, path, "--skip-live", *options,
                                     broker=grading_broker)
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
        "The duplicate delivery of finished R-0002 added a ticket: R-0002 now has 2 tickets;"
        " the completed table holds no key for R-0002, so nothing in the database told"
        " handler.py it was finished (one more of this check's trials failed too)")
    assert UNIT3 in checks[4]["hint"] and UNIT3 in checks[6]["hint"]
    # Unit 2's handler has no inside-transaction checkpoint: the real-effect stop covers check 3.
    assert checks[3]["reason"] == (
        "Nothing was committed and the retry wrote one ticket, acknowledged, after: a stop just"
        " before the commit of the transaction that writes the ticket; the database refusing the"
        " write (database is locked) (handler.py has no checkpoint 'inside-transaction', so"
        " Ctrl+C there was not tried)")


def test_a_failed_check_tells_what_happened_to_each_delivery(graded):
    _, report = graded["unit2"]
    checks = by_number(report)
    # The first failed trial of check 4: Ctrl+C at after-commit, then the retry.
    assert checks[4]["deliveries"] == [
        {"run": 1, "command": "python3 worker.py --pause after-commit", "ended": "exit 130",
         "registration": "R-0002", "redelivered": False,
         "steps": ["paused at after-commit", "stopped by Ctrl+C"],
         "tickets_after_run": {"R-0002": [2]}},
        {"run": 2, "command": "python3 worker.py", "ended": "exit 0",
         "registration": "R-0002", "redelivered": True, "steps": ["called basic_ack", "returned"],
         "tickets_after_run": {"R-0002": [2, 3]}},
    ]
    assert checks[4]["found"] == {"tickets": {"R-0002": [2, 3]}, "completed": [], "queue": [],
                                  "dead_letter_queue": []}
    assert checks[4]["story"] == [
        "run 1  python3 worker.py --pause after-commit: exit 130",
        "       R-0002  redelivered=False  paused at after-commit  stopped by Ctrl+C",
        "       tickets then: R-0002 #2",
        "run 2  python3 worker.py: exit 0",
        "       R-0002  redelivered=True  called basic_ack  returned",
        "       tickets then: R-0002 #2 #3",
        "found  R-0002 #2 #3; completed: none; in the queue: nothing; in the dead-letter queue:"
        " nothing",
    ]
    # Check 6's duplicate, in a new worker run: delivered again as a new message.
    assert checks[6]["story"] == [
        "run 1  python3 worker.py: exit 0",
        "       R-0002  redelivered=False  called basic_ack  returned",
        "       tickets then: R-0002 #2",
        "run 2  python3 worker.py: exit 0",
        "       R-0002  redelivered=False  called basic_ack  returned",
        "       tickets then: R-0002 #2 #3",
        "found  R-0002 #2 #3; completed: none; in the queue: nothing; in the dead-letter queue:"
        " nothing",
    ]
    # The text is the structured story's (so a report from the JSON tells the same).
    assert trial_story.lines(checks[4]) == checks[4]["story"]
    # A passed check stays one line: no story.
    assert set(checks[1]) == {"name", "passed", "reason", "hint"}


def test_a_story_names_a_stop_at_a_real_effect_and_a_raise(graded):
    checks = by_number(graded["ack_inside_transaction"][1])
    assert checks[3]["story"] == [
        "run 1  python3 worker.py, to stop just before the commit of the transaction that writes"
        " the ticket: killed by signal 9",
        "       R-0002  redelivered=False  called basic_ack  killed itself just before the commit"
        " of the transaction that writes the ticket",
        "       tickets then: no ticket",
        "found  no ticket; completed: none; in the queue: nothing; in the dead-letter queue:"
        " nothing",
    ]
    checks = by_number(graded["fstring_sql"][1])
    assert checks[1]["story"] == [
        "run 1  python3 worker.py: exit 1",
        "       R-0002  redelivered=False  raised OperationalError (handler.py line 12): near"
        " \"Neill\": syntax error",
        "       tickets then: no ticket",
        "found  no ticket; completed: none; in the queue: R-0002; in the dead-letter queue:"
        " nothing",
    ]


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
    "keyed_on_delivery_tag": ({5, 6}, 5, TAG_KEY, "delivery.delivery_tag only numbers"),
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
    # Handlers that keep the lesson's words but not its meaning.
    "commits_on_every_way_out": ({3}, 3, "After Ctrl+C at checkpoint inside-transaction, R-0002"
                                 " already had a committed ticket: the work of the interrupted"
                                 " transaction was not rolled back", UNIT3),
    "remembers_finished_ids": ({4, 6}, 6, "The duplicate delivery of finished R-0002 added a"
                               " ticket: R-0002 now has 2 tickets; the completed table holds no"
                               " key for R-0002, so nothing in the database told handler.py it"
                               " was finished", UNIT3),
    "checks_first_delivery_only": ({6}, 6, "The duplicate delivery of finished R-0002, which"
                                   " reached the worker after R-0003 in the same run, added a"
                                   " ticket: R-0002 now has 2 tickets", UNIT3),
    "acks_without_tag": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002: handler.py called"
                         " basic_ack with no delivery tag (so with tag 0, which no delivery has),"
                         " so R-0002 was never acknowledged", UNIT2),
    "acks_on_another_channel": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery of R-0002:"
                                " handler.py called basic_ack on a channel other than `ch`, the"
                                " one that delivered the job; a delivery tag counts only on its"
                                " own channel, so the delivery was never acknowledged",
                                "the channel handle() is given"),
    # A UNIQUE index keeps one ticket per registration only on tickets(registration_id).
    "unique_index_on_name": ({5}, 5, "R-0003, a later registration named 'Same name', got no"
                             " ticket from a second worker run: handler.py's UNIQUE index"
                             " 'tickets_one_per_name' on tickets(name) refused it as a repeat of"
                             " R-0002", "never on the name or a part of the ID"),
    "unique_index_on_id_prefix": ({1, 2, 3, 4, 5, 6}, 1, "The normal delivery left R-0002 without"
                                  " a ticket: handler.py's UNIQUE index 'tickets_one_per_series'"
                                  " on tickets(substr(registration_id, 1, 5)) took its ticket for"
                                  " a repeat of another registration's",
                                  "goes on tickets(registration_id)"),
    "unique_index_on_registrations": ({5}, 5, "Saving a new registration named 'Same name' failed"
                                      " (UNIQUE constraint failed: registrations.name):"
                                      " handler.py's UNIQUE index 'one_guest_per_name' on"
                                      " registrations(name) refused it; no index may refuse the"
                                      " site's registrations", "add an index that refuses"),
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
    requeue on an error, a slow handler, one whose log lines sound alarming, and UNIQUE
    indexes of the handler's own on tickets(registration_id), one through a function only its
    connection knows."""
    status, report = graded[name]
    assert (status, report["passed"], failing(report)) == (0, True, set()), report


def test_json_shape(graded):
    _, report = graded["unit2"]
    assert set(report) == {"passed", "checks"}
    assert isinstance(report["passed"], bool)
    assert len(report["checks"]) == 6
    for check in report["checks"]:
        # A failed check also has its story: structured, and as lines of text.
        story_keys = set() if check["passed"] else {"deliveries", "found", "story"}
        assert set(check) == {"name", "passed", "reason", "hint"} | story_keys
        assert all(isinstance(line, str) and "\n" not in line for line in check.get("story", []))
        assert isinstance(check["passed"], bool)
        assert all(isinstance(check[key], str) for key in ("name", "reason", "hint"))
        assert check["reason"] and "\n" not in check["reason"]
        assert bool(check["hint"]) is (not check["passed"])


def assert_graded_alike(names, grading_broker, graded, *extra):
    """The named handlers graded again (two at a time, with `extra` options) get the verdicts
    (reasons, hints, evidence) and the exit status they got in `graded`."""
    with ThreadPoolExecutor(2) as pool:
        again = dict(zip(names, pool.map(
            lambda name: grade(GRADED[name][0], "--skip-live", *extra, *GRADED[name][1],
                               broker=grading_broker), names)))
    for name in names:
        assert verdicts(again[name][1]["checks"]) == verdicts(graded[name][1]["checks"]), name
        assert again[name][0] == graded[name][0], name


# The handlers whose verdicts hang on timing: an ack just before a crash, a slow
# handler, the lab's own three, and handlers that fail only in a later worker run.
UNDER_LOAD = ["starting", "unit2", "unit3", "ack_inside_transaction", "correct/slow",
              "remembers_finished_ids", "checks_first_delivery_only", "completed_first"]


def test_verdicts_are_the_same_beside_a_busy_loop(graded, grading_broker):
    """A check's variants run concurrently, two gradings at a time: beside a busy loop that
    takes a core, each handler still gets the verdict it gets on a quiet machine. (With every
    core taken, a handler taking a fifth of its time limit per ticket can be stopped: its
    wait for a starved broker is not forgiven as its own wait for a CPU is.)"""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])]
    try:
        assert_graded_alike(UNDER_LOAD, grading_broker, graded)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


@pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                    reason="every handler was graded without a sandbox here: one route only")
def test_every_correct_handler_gets_one_verdict_sandboxed_and_trusted(graded, grading_broker):
    """One handler, one verdict: graded --trusted, each correct handler, however it is written,
    gets on each check the verdict (reason, hint, evidence) it got sandboxed, as a root grader
    grades by default. (The lab's and the wrong handlers are graded both ways in
    tests/test_batch.py, one by one --trusted and as a sandboxed class.)"""
    assert_graded_alike([name for name in GRADED if name.startswith("correct/")], grading_broker,
                        graded, "--trusted")
