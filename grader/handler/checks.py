"""Checks 1-6: the learner's handler.py through real worker processes, real interruptions, real redelivery (runner.py runs them).

Each check runs in labs of its own (own queue, own SQLite file), so one
failure cannot spill into the next. A check is interrupted two ways where
that makes sense:

- as the learner does it: `worker.py --pause POINT`, then Ctrl+C (SIGINT)
  when it prints `Paused POINT.`;
- at the real effects, wherever handler.py put (or forgot) its checkpoints:
  the worker kills itself just before its first database write, just before
  the commit of the transaction that writes the ticket, just after that
  commit, or just before its basic_ack reaches RabbitMQ (see effects.py).
"""

from dataclasses import dataclass

from nightjar.messages import REGISTRATION_ID
from nightjar.registrations import MAX_NAME_LENGTH

from .findings import EFFECT_WHERE, Fail, fail_on_problem, loss_cause, not_back
from .steps import (check_tickets, comes_back, expect_acked, expect_back, expect_retry,
                    expect_settled_by_ack, interrupt, nothing_committed, received_text,
                    run_worker, stop_at, wrong_unique_key)

# Guests' names are data: a quote breaks SQL pasted together from them, and
# accents show a handler that changes the name it writes. LONGEST is as long
# as the site allows.
QUOTED = "Siobhán O'Neill"
SAME = "Same name"
# How long the worker's SQLite waits for the lock the grader holds through the whole run: the
# write is refused however long it waits, so the check waits no longer than it must.
LOCKED_WAIT = 0.1
LONGEST = ("Þórdís Åsa D'Arcy-Nguyễn Zoë " * 4)[:MAX_NAME_LENGTH - 1] + "é"


# ---- the checks ------------------------------------------------------------------


def v_normal(lab):
    registration_id = lab.register(QUOTED)
    run = run_worker(lab)
    fail_on_problem(run, f"the normal delivery of {registration_id}")
    if (registration_id, False) not in run.events.received():
        raise Fail(f"the worker did not receive {registration_id}"
                   f" (it received {received_text(run)})", "grader")
    check_tickets(lab, registration_id, QUOTED, "the normal delivery", run)
    expect_acked(lab, registration_id, "the normal delivery", run)
    return f"{registration_id} got one ticket and its delivery was acknowledged"


def _interrupted_then_retried(lab, name, *, point=None, effect=None, required=True,
                              clean=False, on_pause=None):
    registration_id = lab.register(name)
    if point:
        how = f"Ctrl+C at checkpoint {point}"
        run = interrupt(lab, registration_id, point, required=required,
                        on_pause=on_pause and (lambda _worker: on_pause(registration_id)))
    else:
        how = f"a stop {EFFECT_WHERE[effect]}"
        run = stop_at(lab, registration_id, effect)
    if clean:
        nothing_committed(lab, registration_id, how)
    return registration_id, run, how


def _before_write(point=None, effect=None):
    def variant(lab):
        registration_id, run, how = _interrupted_then_retried(
            lab, LONGEST, point=point, effect=effect)
        expect_back(lab, registration_id, run, how)
        expect_retry(lab, registration_id, LONGEST, how)
        return how
    return variant


def _inside_transaction(point=None, effect=None):
    def variant(lab):
        registration_id, run, how = _interrupted_then_retried(
            lab, "Retry guest", point=point, effect=effect, required=False, clean=True)
        expect_back(lab, registration_id, run, how)
        expect_retry(lab, registration_id, "Retry guest", how)
        return how
    return variant


def v_write_refused(lab):
    """SQLite refuses the write (another connection holds the lock): a real failure inside the work."""
    registration_id = lab.register("Retry guest")
    holder = lab.hold_write_lock()
    try:
        run = run_worker(lab, db_timeout=LOCKED_WAIT)
    finally:
        holder.rollback()
        holder.close()
    how = "the database refusing the write (database is locked)"
    if run.timed_out or run.events.first("load-failed"):
        fail_on_problem(run, f"while {how}")
    nothing_committed(lab, registration_id, how)
    if comes_back(lab, expected=loss_cause(run, registration_id) is None):
        expect_retry(lab, registration_id, "Retry guest", how)
        return how
    settled = run.events.settlement(registration_id)
    if run.returncode == 0 and settled is not None and settled["event"] == "ack":
        raise Fail(f"the database refused the write (database is locked), yet handler.py"
                   f" acknowledged {registration_id} and returned normally: the delivery was"
                   f" lost and {registration_id} has no ticket", "swallowed")
    raise not_back(lab, registration_id, run, how)


def _after_commit(point=None, effect=None):
    def variant(lab):
        seen = {}

        def at_pause(registration_id):
            seen["tickets"] = len(lab.tickets(registration_id))

        registration_id, run, how = _interrupted_then_retried(
            lab, "Retry guest", point=point, effect=effect, on_pause=at_pause)
        committed = seen["tickets"] if point else len(lab.tickets(registration_id))
        if not committed:
            if effect == "before-ack":
                raise Fail(f"{registration_id} was about to be acknowledged before its ticket was"
                           " committed (no ticket existed yet when basic_ack was called)", "lost")
            raise Fail(f"when the worker paused at checkpoint {point}, {registration_id} had no"
                       " committed ticket, so this interruption did not happen after the commit",
                       "checkpoint")
        expect_back(lab, registration_id, run, how)
        expect_retry(lab, registration_id, "Retry guest", how)
        return how
    return variant


def _no_ticket_for_same_name(lab, registration_id, earlier, when):
    """The Fail for a later 'Same name' registration that got no ticket: why it was skipped."""
    odd = [key for key in lab.completed_keys() if not REGISTRATION_ID.match(key)]
    if odd:
        return Fail(f"{registration_id}, a later registration named '{SAME}', got no ticket {when}:"
                    f" handler.py took it as already completed, because the completed table"
                    f" holds {', '.join(map(repr, odd))}, which"
                    f" {'is not a registration ID' if len(odd) == 1 else 'are not registration IDs'}",
                    "completion-key")
    if wrong := wrong_unique_key(lab):
        return Fail(f"{registration_id}, a later registration named '{SAME}', got no ticket {when}:"
                    f" handler.py's {wrong} refused it as a repeat of {' or '.join(earlier)}",
                    "unique-key")
    return Fail(f"{registration_id}, a later registration named '{SAME}', got no ticket {when}:"
                f" it was treated as a repeat of {' or '.join(earlier)}", "same-name")


def v_same_name(lab):
    """Three guests named 'Same name': the first in one worker run, the other two in a second
    run (--drain) on the same database. Catches handlers that key the work on the name, or on
    something that starts again in every worker run (delivery.delivery_tag)."""
    first = lab.register(SAME)
    run = run_worker(lab)
    fail_on_problem(run, f"the first worker run, processing {first}")
    check_tickets(lab, first, SAME, "the first worker run", run)
    expect_settled_by_ack(first, "the first worker run", run)
    later = [lab.register(SAME), lab.register(SAME)]
    run = run_worker(lab, "--drain", deliveries=len(later))
    context = f"a second worker run on the same database, processing {' and '.join(later)}"
    fail_on_problem(run, context)
    got = [registration_id for registration_id, _ in run.events.received()]
    for index, registration_id in enumerate(later):
        if registration_id not in got:
            raise Fail(f"{context}: the worker did not receive {registration_id}"
                       f" (it received {received_text(run)})", "grader")
        if not lab.tickets(registration_id):
            when = "from a second worker run" if index == 0 else "in the same worker run"
            raise _no_ticket_for_same_name(lab, registration_id, [first, *later[:index]], when)
        check_tickets(lab, registration_id, SAME, context, run)
        expect_settled_by_ack(registration_id, context, run)
    expect_acked(lab, later[-1], context, run)
    return (f"{first} in one worker run, {later[0]} and {later[1]} in a second run on the same"
            " database")


def _no_second_ticket(lab, registration_id, context, run):
    """The duplicate delivery of a finished registration: it is received, adds no ticket, is acked."""
    if (registration_id, False) not in run.events.received():
        raise Fail(f"{context}: the worker did not receive it"
                   f" (it received {received_text(run)})", "grader")
    tickets = lab.tickets(registration_id)
    if len(tickets) > 1:
        where = ("" if lab.completed(registration_id) else
                 f"; the completed table holds no key for {registration_id}, so nothing in the"
                 " database told handler.py it was finished")
        raise Fail(f"{context} added a ticket: {registration_id} now has {len(tickets)}"
                   f" tickets{where}", "duplicate")
    check_tickets(lab, registration_id, "Normal guest", context, run)
    expect_acked(lab, registration_id, context, run)


def v_duplicate(lab):
    """The duplicate reaches a fresh worker run, as after a restart."""
    registration_id = lab.register("Normal guest")
    run = run_worker(lab)
    fail_on_problem(run, f"the first delivery of {registration_id}")
    check_tickets(lab, registration_id, "Normal guest", "the first delivery", run)
    expect_settled_by_ack(registration_id, "the first delivery", run)
    lab.deliver_again(registration_id)
    run = run_worker(lab)
    context = f"the duplicate delivery of finished {registration_id}"
    fail_on_problem(run, context)
    _no_second_ticket(lab, registration_id, context, run)
    return "in a new worker run"


def v_duplicate_same_run(lab):
    """The duplicate reaches a worker that has handled other jobs since, as a long-running
    worker sees it: catches handlers that look for repeats only in a run's first delivery."""
    registration_id = lab.register("Normal guest")
    other = lab.register("Other guest")
    lab.deliver_again(registration_id)
    run = run_worker(lab, "--drain", deliveries=3)
    context = (f"the duplicate delivery of finished {registration_id}, which reached the worker"
               f" after {other} in the same run,")
    fail_on_problem(run, context)
    check_tickets(lab, other, "Other guest", f"the same run, processing {other}", run)
    _no_second_ticket(lab, registration_id, context, run)
    return "in the same worker run, after another registration"


@dataclass
class Check:
    number: int
    title: str
    variants: list  # [(key, function(lab) -> how it was interrupted, or a sentence)]
    success: str = "{hows}"

    @property
    def name(self):
        return f"{self.number}. {self.title}"


CHECKS = [
    Check(1, "Normal delivery gives one ticket and an ack", [("normal", v_normal)]),
    Check(2, "Interrupted before the write: the delivery is not lost", [
        ("ctrl-c-before-write", _before_write(point="before-write")),
        ("stop-before-write", _before_write(effect="before-write")),
    ], "the delivery came back with redelivered=True and got one ticket, acknowledged, after: {hows}"),
    Check(3, "Interrupted inside the transaction: nothing committed, the retry writes one ticket", [
        ("ctrl-c-inside", _inside_transaction(point="inside-transaction")),
        ("stop-before-commit", _inside_transaction(effect="before-commit")),
        ("write-refused", v_write_refused),
    ], "nothing was committed and the retry wrote one ticket, acknowledged, after: {hows}"),
    Check(4, "Interrupted after the commit, before the ack: no second ticket", [
        ("ctrl-c-after-commit", _after_commit(point="after-commit")),
        ("stop-after-commit", _after_commit(effect="after-commit")),
        ("stop-before-ack", _after_commit(effect="before-ack")),
    ], "the redelivery wrote no second ticket and was acknowledged, after: {hows}"),
    Check(5, "Two registrations with the same name get two tickets", [("same-name", v_same_name)],
          f"three registrations all named '{SAME}' got one ticket each: {{hows}}"),
    Check(6, "A duplicate delivery of a finished ID adds no ticket", [
        ("duplicate", v_duplicate),
        ("duplicate-same-run", v_duplicate_same_run),
    ], "the duplicate delivery added no ticket and was acknowledged: {hows}"),
]
