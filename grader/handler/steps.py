"""Steps the checks share: running and interrupting a watched worker, and judging what it left behind.

Each check runs in a throwaway lab of its own (nightjar/harness/lab.py); the
interruptions themselves are the harness's (nightjar/harness/interruptions.py).
Each step raises Fail (with a reason and a hint key, see findings.py) when
what it expects did not happen.
"""

from nightjar.harness.interruptions import ctrl_c_at, stop_at_effect
from nightjar.harness.lab import RETURN_WAIT
from nightjar.harness.processes import DeliveryClock

from .findings import (EFFECT_NEVER, EFFECT_WHERE, Fail, NotApplicable, dead_letters,
                       fail_on_problem, loss_cause, name_text, not_back, settle_call,
                       too_busy)
from .trial_story import record_run

# When the worker had already acknowledged the delivery, it is not expected back.
LOST_WAIT = 1.0
# After a normal run: how long to watch that nothing comes back to the queue.
SETTLE = 0.3
# The same when the run recorded the ack of that very delivery: the worker's
# clean close reached RabbitMQ after the ack, so only a slip is watched for.
SETTLE_ACKED = 0.1
# The end of a worker's stderr kept for a reason's detail (a handler may print megabytes).
STDERR_TAIL = 4096


def run_worker(lab, *args, db_timeout=None, deliveries=1):
    """One watched worker run to its end, killed when one of the `deliveries` it is to handle
    takes longer than the lab's worker_timeout."""
    worker = lab.start("worker.py", *args, watch=True, db_timeout=db_timeout,
                       stderr_limit=STDERR_TAIL)
    worker.finish(timeout=lab.worker_timeout,
                  clock=DeliveryClock(worker, lab.worker_timeout, deliveries))
    record_run(lab, worker, " ".join(["python3 worker.py", *args]))
    return worker


def comes_back(lab, expected=True):
    """True once the interrupted delivery is ready again (waiting less when it was settled)."""
    return lab.comes_back(timeout=RETURN_WAIT if expected else LOST_WAIT)


def interrupt(lab, registration_id, point, *, required=True, on_pause=None):
    """Ctrl+C at checkpoint POINT, as the learner does it."""
    run = ctrl_c_at(lab, point, on_pause=on_pause, watch=True, stderr_limit=STDERR_TAIL)
    record_run(lab, run, f"python3 worker.py --pause {point}",
               "stopped by Ctrl+C" if run.paused else None)
    how = f"Ctrl+C at checkpoint {point}"
    if run.paused:
        if not run.events.paused_at(point):
            raise Fail(f"handler.py printed 'Paused {point}.' itself, without calling"
                       f" checkpoint(pause, '{point}'), so the interruption came at the wrong"
                       " moment", "checkpoint")
        if run.timed_out:
            if run.starved:
                raise too_busy(run, f"after {how}")
            raise Fail(f"after {how} the worker did not stop within {run.time_limit:g} s", "stuck")
        if run.returncode != 130:
            raise Fail(f"after {how} the worker carried on and exited with status"
                       f" {run.returncode} instead of stopping (130): handler.py caught the"
                       " interruption", "swallowed")
        return run
    fail_on_problem(run, f"while waiting for checkpoint {point}")
    if not required:
        raise NotApplicable(f"handler.py has no checkpoint '{point}', so Ctrl+C there was not"
                            " tried")
    raise Fail(f"could not interrupt at checkpoint {point}: handler.py never called"
               f" checkpoint(pause, '{point}') while processing {registration_id}, so this"
               " interruption could not be carried out", "checkpoint")


def stop_at(lab, registration_id, effect):
    """The worker kills itself at a real effect."""
    run = stop_at_effect(lab, effect, stderr_limit=STDERR_TAIL)
    record_run(lab, run, f"python3 worker.py, to stop {EFFECT_WHERE[effect]}")
    if run.events.stopped_at(effect):
        return run
    fail_on_problem(run, f"while waiting to stop the worker {EFFECT_WHERE[effect]}")
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
    if comes_back(lab, expected=loss_cause(run, registration_id) is None):
        return
    raise not_back(lab, registration_id, run, how)


def check_tickets(lab, registration_id, name, context, run=None):
    """Exactly one ticket, with the guest's name; `context` names what just ran."""
    tickets = lab.tickets(registration_id)
    if not tickets:
        if wrong := wrong_unique_key(lab):
            raise Fail(f"{context} left {registration_id} without a ticket: handler.py's {wrong}"
                       " took its ticket for a repeat of another registration's", "unique-key")
        if lab.completed(registration_id):
            raise Fail(f"{context} left {registration_id} marked completed but without a ticket",
                       "partial")
        if run is not None and (registration_id, True) in run.events.received():
            raise Fail(f"{context}: the redelivery of {registration_id} (redelivered=True) was"
                       f" acknowledged without writing a ticket, so {registration_id} has none",
                       "skipped")
        raise Fail(f"{context} left {registration_id} without a ticket", "no-ticket")
    if len(tickets) > 1:
        numbers = ", ".join(str(ticket.number) for ticket in tickets)
        raise Fail(f"{context} wrote a second ticket: {registration_id} has {len(tickets)}"
                   f" tickets ({numbers})", "duplicate")
    written = tickets[0].name
    if written != name:
        lengths = (f" ({len(written)} characters instead of {len(name)})"
                   if len(written) != len(name) else "")
        raise Fail(f"{context} wrote the ticket of {registration_id} with the name"
                   f" {name_text(written)} instead of {name_text(name)}{lengths}", "wrong-name")


def wrong_unique_key(lab):
    """A UNIQUE index of handler.py's on tickets keyed on anything but registration_id alone
    (its description), or None."""
    return next((description for description, key in lab.unique_keys("tickets")
                 if key != "registration_id"), None)


def expect_settled_by_ack(registration_id, context, run):
    """handler.py settled the delivery with basic_ack, not with a nack or reject."""
    settled = run.events.settlement(registration_id)
    if settled is not None and settled["event"] != "ack":
        if dead_letters(settled):
            raise Fail(f"{context}: handler.py settled {registration_id} with"
                       f" {settle_call(settled)} instead of acknowledging it, so RabbitMQ moved"
                       " it to the dead-letter queue, where no worker takes it", "dead-letter")
        raise Fail(f"{context}: handler.py put {registration_id} back in the queue with"
                   f" {settle_call(settled)} instead of acknowledging it", "no-ack")


def expect_acked(lab, registration_id, context, run):
    """The run acknowledged the delivery: nothing back in the queue, nothing dead-lettered."""
    expect_settled_by_ack(registration_id, context, run)
    acked = run.events.settlement(registration_id) is not None
    if not lab.stays_empty(SETTLE_ACKED if acked else SETTLE):
        raise Fail(f"{context}: {registration_id} was not acknowledged; it went back to the"
                   " queue", "no-ack")
    if lab.dead_lettered():
        raise Fail(f"{context}: {registration_id} ended in the dead-letter queue instead of"
                   " being acknowledged", "dead-letter")


def received_text(run):
    """What a run took from the queue, for a reason: 'R-0002 (redelivered=True)' or 'nothing'."""
    return " / ".join(f"{registration_id} (redelivered={again})"
                      for registration_id, again in run.events.received()) or "nothing"


def expect_retry(lab, registration_id, name, how):
    """Run the worker again: the delivery comes back redelivered and ends with one ticket, acked."""
    run = run_worker(lab)
    context = f"the retry after {how}"
    fail_on_problem(run, context)
    received = run.events.received()
    if not received or received[0][0] != registration_id:
        raise Fail(f"{context}: the worker did not receive {registration_id} again"
                   f" (it received {received_text(run)})", "lost")
    if not received[0][1]:
        raise Fail(f"{context}: {registration_id} came back with redelivered=False, expected"
                   " RabbitMQ's redelivered=True", "grader")
    check_tickets(lab, registration_id, name, context, run)
    expect_acked(lab, registration_id, context, run)
