"""The trials of the learner's handler.py that ./check runs in a throwaway lab (own database and queue).

The lab and the Ctrl+C at a checkpoint are the harness's (nightjar/harness/),
the same the grader uses.
"""

from nightjar.harness.interruptions import ctrl_c_at
from nightjar.harness.lab import Lab
from nightjar.harness.reading import Tampered

# How long a trial waits for the worker to pause at a checkpoint, and for an
# interrupted delivery to be back (RabbitMQ takes milliseconds; the learner waits).
PAUSE_WAIT = 20
BACK_WAIT = 1.5


def trial_queue_prefix(settings):
    return f"{settings.queue}.trial"


class Missing(Exception):
    """What a trial run of handler.py showed is missing: one line."""


def interrupt_at(lab, point, hint, on_pause=None):
    """Ctrl+C at checkpoint POINT, as the learner does it; Missing when the worker never paused there."""
    worker = ctrl_c_at(lab, point, on_pause=on_pause)
    if not worker.paused:
        last = (worker.stderr.strip().splitlines() or [f"it never printed Paused {point}."])[-1]
        raise Missing(f"missing: {hint} (python3 worker.py --pause {point}: {last})")
    return worker


def run_worker(lab, *args):
    """Run the worker to the end; Missing (with its last error line) unless it exits 0."""
    result = lab.run("worker.py", *args)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise Missing(f"missing: a handler.py that runs without errors (python3 worker.py"
                      f" {' '.join(args)}".rstrip() + f" exited with status {result.returncode}: {last})")
    return result


def expect_redelivery(result, registration_id):
    if f"Received {registration_id} redelivered=True" not in result.stdout.splitlines():
        raise Missing("missing: the redelivery of the interrupted registration"
                      f" (python3 worker.py printed {result.stdout.strip()!r})")


LOST_BEFORE_WRITE = ("missing: a handler.py that acknowledges after the commit (interrupted at"
                     " before-write, the registration was lost: RabbitMQ had nothing to deliver again)")
NO_AFTER_COMMIT = "a handler.py with checkpoint(pause, 'after-commit') between 'with db:' and the ack"


def trial_ack_after_commit(lab):
    """Unit 2: interrupted before the write, the job comes back; at the commit, it is not yet acked."""
    first = lab.register("Retry guest")
    interrupt_at(lab, "before-write", "a handler.py with checkpoint(pause, 'before-write')"
                                      " before the write")
    if not lab.comes_back(timeout=BACK_WAIT):
        raise Missing(LOST_BEFORE_WRITE)
    rerun = run_worker(lab)
    expect_redelivery(rerun, first)
    if len(lab.tickets(first)) != 1:
        raise Missing(f"missing: one ticket after the redelivery (there are {len(lab.tickets(first))})")

    interrupt_after_commit(lab, lab.register("Retry guest"))


def interrupt_after_commit(lab, registration_id):
    """Ctrl+C at after-commit: the ticket is committed there and the delivery comes back."""
    at_pause = {}
    interrupt_at(lab, "after-commit", NO_AFTER_COMMIT, on_pause=lambda _worker: at_pause.update(
        tickets=len(lab.tickets(registration_id)), waiting=lab.ready()))
    if at_pause["tickets"] != 1:
        raise Missing("missing: a handler.py that commits one ticket before checkpoint(pause,"
                      f" 'after-commit') ({at_pause['tickets']} tickets there)")
    if not lab.comes_back(more_than=at_pause["waiting"], timeout=BACK_WAIT):
        raise Missing("missing: a handler.py that acknowledges after the commit (interrupted at"
                      " after-commit, the delivery did not come back)")


def trial_idempotent(lab):
    """Unit 3: a redelivery after the commit adds no ticket; two Same name guests get two tickets."""
    first = lab.register("Same name")
    second = lab.register("Same name")

    interrupt_after_commit(lab, first)
    rerun = run_worker(lab)
    expect_redelivery(rerun, first)
    if len(lab.tickets(first)) != 1:
        raise Missing("missing: an idempotent handler.py (interrupted after the commit, the"
                      " redelivery made a second ticket for the same registration)")

    interrupt_at(lab, "inside-transaction", "a handler.py with checkpoint(pause,"
                                            " 'inside-transaction') between its two writes")
    if lab.tickets(second) or lab.completed(second):
        raise Missing("missing: a handler.py whose two writes share one 'with db:' (interrupted"
                      " inside the transaction, a ticket or completion record was kept)")
    run_worker(lab, "--drain")
    if len(lab.tickets(second)) != 1:
        raise Missing("missing: a ticket for each of two registrations named Same name (the"
                      f" second has {len(lab.tickets(second))})")

    lab.deliver_again(first)  # as python3 desk.py retry does
    run_worker(lab, "--drain")
    if len(lab.tickets(first)) != 1 or lab.ready():
        raise Missing("missing: an idempotent handler.py (an explicit duplicate delivery of a"
                      " finished registration added a ticket)")


def try_handler(trial, handler, settings):
    """Run a trial in a throwaway lab (own database and queue on the live broker); its lines."""
    with Lab(settings.amqp_url, handler=handler, queue_prefix=trial_queue_prefix(settings),
             worker_timeout=PAUSE_WAIT) as lab:
        try:
            trial(lab)
        except Missing as line:
            return [str(line)]
        except Tampered as refused:  # a view, a trigger, changed columns of a lab table...
            return [f"missing: {refused}"]
    return []


TRIALS = {2: trial_ack_after_commit, 3: trial_idempotent}
