"""Checks 1-6: the learner's handler.py through real worker processes, real interruptions, real redelivery.

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

import re
import threading
import traceback
from dataclasses import dataclass

UNIT2 = 'Revisit unit 2 "Acknowledge only completed work"'
UNIT3 = 'Revisit unit 3 "Repeat database results safely"'

HINTS = {
    "lost": f"{UNIT2}: call ch.basic_ack(delivery.delivery_tag) last, after the `with db:` block"
            " has committed the ticket.",
    "no-ack": f"{UNIT2}: end handle() with ch.basic_ack(delivery.delivery_tag), after the"
              " `with db:` block.",
    "double-ack": f"{UNIT2}: acknowledge each delivery exactly once, after the commit.",
    "checkpoint": f"{UNIT2}: keep the step's checkpoint(pause, ...) calls where the step puts them.",
    "no-ticket": f"{UNIT2}: write the ticket with INSERT INTO tickets(registration_id,name)"
                 " VALUES (?,?) and (job['id'], job['name']) inside `with db:`.",
    "swallowed": f"{UNIT2}: do not catch the error and acknowledge anyway; let it propagate, so"
                 " the delivery stays unacknowledged and RabbitMQ delivers it again.",
    "error": f"{UNIT3}: re-copy the handler from the step, keeping its 4-space indentation;"
             " python3 worker.py shows the full error.",
    "stuck": f"{UNIT3}: handle() must return; re-copy the handler from the step.",
    "partial": f"{UNIT3}: write the completion key and the ticket in the same `with db:` block,"
               " so they commit together or not at all.",
    "duplicate": f"{UNIT3}: record job['id'] with INSERT OR IGNORE INTO completed in the ticket's"
                 " transaction, and write the ticket only when its rowcount is 1.",
    "same-name": f"{UNIT3}: a registration is identified by job['id']; two guests may share a"
                 " name and each needs a ticket.",
    "skipped": f"{UNIT3}: a redelivered job may never have been finished; let the completion key"
               " in the database decide, not delivery.redelivered.",
    "grader": "This is a problem of the grader or its broker, not of handler.py; run it again.",
}

EFFECT_WHERE = {
    "before-write": "just before its first database write",
    "before-commit": "just before the commit of the transaction that writes the ticket",
    "after-commit": "just after the transaction that wrote the ticket committed",
    "before-ack": "just before its basic_ack reached RabbitMQ",
}
EFFECT_NEVER = {
    "before-write": ("handler.py never wrote to the database", "no-ticket"),
    "before-commit": ("handler.py never committed a transaction that wrote a ticket", "no-ticket"),
    "after-commit": ("handler.py never committed a transaction that wrote a ticket", "no-ticket"),
    "before-ack": ("handler.py never acknowledged the delivery", "no-ack"),
}


class Fail(Exception):
    def __init__(self, reason, hint):
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


class NotApplicable(Exception):
    """This way of interrupting does not apply to the handler (the reason says why)."""


@dataclass
class Result:
    name: str
    passed: bool
    reason: str
    hint: str = ""

    def as_dict(self):
        return {"name": self.name, "passed": self.passed, "reason": self.reason, "hint": self.hint}


# ---- reading a worker run --------------------------------------------------------


def _exception_line(stderr):
    lines = [line for line in stderr.splitlines() if line.strip()]
    skip = ("Traceback", "handler.py", "R-", "During handling", "The above", "Pause point")
    candidates = [line for line in lines if not line.startswith((" ", "\t") + skip)]
    text = candidates[-1] if candidates else (lines[-1].strip() if lines else "no message")
    where = re.findall(r'File "[^"]*handler\.py", line (\d+)', stderr)
    if where and "line" not in text:
        text += f" (handler.py line {where[-1]})"
    return text


def run_problem(run, what):
    """(reason, hint) when the worker did not finish a delivery normally, else None."""
    err = run.stderr
    if run.timed_out:
        return (f"{what}: the worker did not finish within {run.timeout:g} s, so it was stopped;"
                " handler.py seems stuck (an endless loop?)", "stuck")
    if "handler.py could not be loaded" in err:
        detail = _exception_line(err).removeprefix("handler.py could not be loaded: ")
        return f"handler.py could not be loaded: {detail}", "error"
    if "acknowledging it twice" in err:
        return (f"{what}: handler.py acknowledged the delivery twice (RabbitMQ closes the"
                " channel on the second ack: PRECONDITION_FAILED, unknown delivery tag)",
                "double-ack")
    if "raised an error" in err:
        return f"{what}: handler.py raised {_exception_line(err)}", "error"
    if "returned without acknowledging" in err:
        return (f"{what}: handler.py returned without acknowledging the delivery, so RabbitMQ"
                " still holds it and would deliver it again", "no-ack")
    if "left a transaction open" in err:
        return (f"{what}: handler.py left a transaction open and its writes were rolled back"
                " (the writes belong inside `with db:`)", "no-ticket")
    if "was never reached" in err:
        return None  # the caller decides what a missing checkpoint means
    if run.returncode != 0:
        detail = _exception_line(err) if err.strip() else "no error message"
        return f"{what}: the worker exited with status {run.returncode}: {detail}", "error"
    return None


def _fail_on_problem(run, what):
    problem = run_problem(run, what)
    if problem:
        raise Fail(*problem)


def _loss_cause(run):
    effects = run.effects()
    if "acked" not in effects:
        return None
    ack = effects.index("acked")
    if "before-write" not in effects[:ack]:
        return "it was acknowledged before its ticket was written"
    if "after-commit" not in effects[:ack]:
        return "it was acknowledged before the transaction writing its ticket committed"
    return "it had already been acknowledged"


# ---- steps the checks share --------------------------------------------------------


def interrupt(lab, registration_id, point, *, required=True, on_pause=None):
    """Ctrl+C at checkpoint POINT, as the learner does it."""
    run = lab.run(interrupt_at=point, on_pause=on_pause)
    how = f"Ctrl+C at checkpoint {point}"
    if run.paused:
        if run.timed_out:
            raise Fail(f"after {how} the worker did not stop within {run.timeout:g} s", "stuck")
        if run.returncode != 130:
            raise Fail(f"after {how} the worker carried on and exited with status"
                       f" {run.returncode} instead of stopping (130): handler.py caught the"
                       " interruption", "swallowed")
        return run
    _fail_on_problem(run, f"while waiting for checkpoint {point}")
    if not required:
        raise NotApplicable(f"handler.py has no checkpoint '{point}', so {how} was not tried")
    raise Fail(f"could not interrupt at checkpoint {point}: handler.py never called"
               f" checkpoint(pause, '{point}') while processing {registration_id}, so this"
               " interruption could not be carried out", "checkpoint")


def stop_at(lab, registration_id, effect):
    """The worker kills itself at a real effect."""
    run = lab.run(stop=effect)
    if run.stopped_at(effect):
        return run
    _fail_on_problem(run, f"while waiting to stop the worker {EFFECT_WHERE[effect]}")
    never, hint = EFFECT_NEVER[effect]
    raise Fail(f"could not stop the worker {EFFECT_WHERE[effect]}: {never} while processing"
               f" {registration_id}, so this interruption could not be carried out", hint)


def nothing_committed(lab, registration_id, how):
    if lab.tickets(registration_id):
        raise Fail(f"after {how}, {registration_id} already had a committed ticket: the work of"
                   " the interrupted transaction was not rolled back", "partial")
    if lab.completed(registration_id):
        raise Fail(f"after {how}, the completion key of {registration_id} was already committed"
                   " without its ticket, so a retry would skip it for ever", "partial")


def expect_back(lab, registration_id, run, how):
    """The unfinished delivery must be ready again in the queue."""
    cause = _loss_cause(run)
    if lab.wait_until_back(expected=cause is None):
        return
    tickets = len(lab.tickets(registration_id))
    if cause is None:
        cause = "RabbitMQ did not deliver it again in time"
    outcome = ("it has no ticket" if not tickets
               else "its ticket exists only because the worker got past the write first")
    raise Fail(f"{registration_id} was lost: {cause}, so after {how} RabbitMQ had nothing to"
               f" deliver again; {outcome}", "lost")


def check_tickets(lab, registration_id, name, context, run=None):
    """Exactly one ticket, with the guest's name; `context` names what just ran."""
    tickets = lab.tickets(registration_id)
    if not tickets:
        if lab.completed(registration_id):
            raise Fail(f"{context} left {registration_id} marked completed but without a ticket",
                       "partial")
        if run is not None and (registration_id, True) in run.received():
            raise Fail(f"{context}: the redelivery of {registration_id} (redelivered=True) was"
                       f" acknowledged without writing a ticket, so {registration_id} has none",
                       "skipped")
        raise Fail(f"{context} left {registration_id} without a ticket", "no-ticket")
    if len(tickets) > 1:
        numbers = ", ".join(str(number) for number, _ in tickets)
        raise Fail(f"{context} wrote a second ticket: {registration_id} has {len(tickets)}"
                   f" tickets ({numbers})", "duplicate")
    if tickets[0][1] != name:
        raise Fail(f"{context} wrote the ticket of {registration_id} with the name"
                   f" {tickets[0][1]!r} instead of {name!r}", "no-ticket")


def expect_acked(lab, registration_id, context):
    if not lab.settled_empty():
        raise Fail(f"{context}: {registration_id} was not acknowledged; it went back to the"
                   " queue", "no-ack")


def expect_retry(lab, registration_id, name, how):
    """Run the worker again: the delivery comes back redelivered and ends with one ticket, acked."""
    run = lab.run()
    context = f"the retry after {how}"
    _fail_on_problem(run, context)
    received = run.received()
    if not received or received[0][0] != registration_id:
        raise Fail(f"{context}: the worker did not receive {registration_id} again"
                   f" (it printed {' / '.join(run.stdout) or 'nothing'})", "lost")
    if not received[0][1]:
        raise Fail(f"{context}: {registration_id} came back with redelivered=False, expected"
                   " RabbitMQ's redelivered=True", "grader")
    check_tickets(lab, registration_id, name, context, run)
    expect_acked(lab, registration_id, context)


# ---- the checks ------------------------------------------------------------------


def v_normal(lab):
    registration_id = lab.register("Normal guest")
    run = lab.run()
    _fail_on_problem(run, f"the normal delivery of {registration_id}")
    if (registration_id, False) not in run.received():
        raise Fail(f"the worker did not receive {registration_id}"
                   f" (it printed {' / '.join(run.stdout) or 'nothing'})", "grader")
    check_tickets(lab, registration_id, "Normal guest", "the normal delivery", run)
    expect_acked(lab, registration_id, "the normal delivery")
    return f"{registration_id} got one ticket and its delivery was acknowledged"


def _interrupted_then_retried(lab, name, *, point=None, effect=None, required=True,
                              clean=False, on_pause=None):
    registration_id = lab.register(name)
    if point:
        how = f"Ctrl+C at checkpoint {point}"
        run = interrupt(lab, registration_id, point, required=required,
                        on_pause=on_pause and (lambda: on_pause(registration_id)))
    else:
        how = f"a stop {EFFECT_WHERE[effect]}"
        run = stop_at(lab, registration_id, effect)
    if clean:
        nothing_committed(lab, registration_id, how)
    return registration_id, run, how


def _before_write(point=None, effect=None):
    def variant(lab):
        registration_id, run, how = _interrupted_then_retried(
            lab, "Retry guest", point=point, effect=effect)
        expect_back(lab, registration_id, run, how)
        expect_retry(lab, registration_id, "Retry guest", how)
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
        run = lab.run(db_timeout=0.5)
    finally:
        holder.rollback()
        holder.close()
    how = "the database refusing the write (database is locked)"
    if run.timed_out or "could not be loaded" in run.stderr:
        _fail_on_problem(run, f"while {how}")
    nothing_committed(lab, registration_id, how)
    acked = _loss_cause(run) is not None
    if not lab.wait_until_back(expected=not acked):
        if run.returncode == 0:
            raise Fail(f"the database refused the write (database is locked), yet handler.py"
                       f" acknowledged {registration_id} and returned normally: the delivery was"
                       f" lost and {registration_id} has no ticket", "swallowed")
        raise Fail(f"{registration_id} was lost: {_loss_cause(run)}, so after {how} RabbitMQ"
                   " had nothing to deliver again; it has no ticket", "lost")
    expect_retry(lab, registration_id, "Retry guest", how)
    return how


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


def v_same_name(lab):
    first = lab.register("Same name")
    second = lab.register("Same name")
    run = lab.run("--drain")
    _fail_on_problem(run, f"processing {first} and {second}")
    got = [registration_id for registration_id, _ in run.received()]
    for registration_id in (first, second):
        if registration_id not in got:
            raise Fail(f"the worker did not receive {registration_id}", "grader")
    context = "processing two guests both named 'Same name'"
    check_tickets(lab, first, "Same name", context)
    if not lab.tickets(second):
        raise Fail(f"{second}, the second registration named 'Same name', got no ticket: it was"
                   f" treated as a repeat of {first}", "same-name")
    check_tickets(lab, second, "Same name", context)
    expect_acked(lab, second, "the two deliveries")
    return f"{first} and {second}, both 'Same name', got one ticket each"


def v_duplicate(lab):
    registration_id = lab.register("Normal guest")
    run = lab.run()
    _fail_on_problem(run, f"the first delivery of {registration_id}")
    check_tickets(lab, registration_id, "Normal guest", "the first delivery", run)
    lab.deliver_again(registration_id, "Normal guest")
    run = lab.run()
    context = f"the duplicate delivery of finished {registration_id}"
    _fail_on_problem(run, context)
    if (registration_id, False) not in run.received():
        raise Fail(f"{context}: the worker did not receive it"
                   f" (it printed {' / '.join(run.stdout) or 'nothing'})", "grader")
    tickets = lab.tickets(registration_id)
    if len(tickets) > 1:
        raise Fail(f"{context} added a ticket: {registration_id} now has {len(tickets)} tickets",
                   "duplicate")
    check_tickets(lab, registration_id, "Normal guest", context, run)
    expect_acked(lab, registration_id, context)
    return "the duplicate delivery added no ticket and was acknowledged"


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
    Check(5, "Two registrations with the same name get two tickets", [("same-name", v_same_name)]),
    Check(6, "A duplicate delivery of a finished ID adds no ticket", [("duplicate", v_duplicate)]),
]


def _run_variant(make_lab, check, key, function):
    """('pass'|'n/a'|'fail', sentence, hint) for one variant; never raises."""
    lab = None
    try:
        lab = make_lab(f"c{check.number}-{key}")
        return "pass", function(lab), ""
    except NotApplicable as note:
        return "n/a", str(note), ""
    except Fail as failure:
        return "fail", failure.reason, HINTS.get(failure.hint, failure.hint)
    except Exception as error:  # the grader's own trouble: say so, never crash
        detail = traceback.format_exception_only(type(error), error)[-1].strip()
        return "fail", f"the grader could not carry out this check ({detail})", HINTS["grader"]
    finally:
        if lab is not None:
            try:
                lab.close()
            except Exception:
                pass


def combine(check, outcomes):
    """One Result from the variants' outcomes, in the check's variant order."""
    failures = [(text, hint) for status, text, hint in outcomes if status == "fail"]
    if failures:
        reason, hint = failures[0]
        if len(failures) == 2:
            reason += " (one more interruption of this check failed too)"
        elif len(failures) > 2:
            reason += f" ({len(failures) - 1} more interruptions of this check failed too)"
        return Result(check.name, False, _sentence(reason), hint)
    passed = [text for status, text, _ in outcomes if status == "pass"]
    notes = [text for status, text, _ in outcomes if status == "n/a"]
    reason = check.success.format(hows="; ".join(passed))
    if notes:
        reason += " (" + "; ".join(notes) + ")"
    return Result(check.name, True, _sentence(reason), "")


def _sentence(text):
    if text.startswith(("handler.py", "worker.py")):
        return text
    return text[:1].upper() + text[1:]


def run_checks(make_lab, checks=CHECKS, parallel=None):
    """Every variant of every check, concurrently; [Result] in check order."""
    tasks = [(check, key, function) for check in checks for key, function in check.variants]
    outcomes = {}
    limit = threading.Semaphore(parallel or len(tasks))

    def work(index, check, key, function):
        with limit:
            outcomes[index] = _run_variant(make_lab, check, key, function)

    threads = [threading.Thread(target=work, args=(i, *task), daemon=True)
               for i, task in enumerate(tasks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)
    results = []
    for check in checks:
        mine = [outcomes[i] for i, task in enumerate(tasks) if task[0] is check]
        results.append(combine(check, mine))
    return results
