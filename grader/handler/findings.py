"""What a worker run shows, in words: failures, their reasons and the hints that go with them.

Everything here is decided from the run's events (nightjar/events.py), its
exit status, the lab's database and its queues; never from what the worker
or handler.py printed. Reasons and hints are shortened to REASON_LIMIT.
"""

from dataclasses import dataclass

from nightjar.events import shorten

REASON_LIMIT = 300
NAME_LIMIT = 40  # a name quoted inside a reason (names may be 80 characters long)

UNIT2 = 'Revisit unit 2 "Acknowledge only completed work"'
UNIT3 = 'Revisit unit 3 "Repeat database results safely"'

HINTS = {
    "lost": f"{UNIT2}: call ch.basic_ack(delivery.delivery_tag) last, after the `with db:` block"
            " has committed the ticket.",
    "no-ack": f"{UNIT2}: end handle() with ch.basic_ack(delivery.delivery_tag), after the"
              " `with db:` block.",
    "double-ack": f"{UNIT2}: acknowledge each delivery exactly once, after the commit.",
    "dead-letter": f"{UNIT2}: finish with ch.basic_ack(delivery.delivery_tag) after the commit;"
                   " on an error let it propagate (or nack with requeue=True). basic_reject or"
                   " basic_nack with requeue=False moves the delivery to the dead-letter queue.",
    "checkpoint": f"{UNIT2}: keep the step's checkpoint(pause, ...) calls where the step puts them.",
    "no-ticket": f"{UNIT2}: write the ticket with INSERT INTO tickets(registration_id,name)"
                 " VALUES (?,?) and (job['id'], job['name']) inside `with db:`.",
    "wrong-name": f"{UNIT2}: write job['name'] into the ticket exactly as it came, passed as a"
                  " ? parameter: guests' names may hold quotes, accents and any script.",
    "sql-data": f"{UNIT2}: never paste values into the SQL text; write ? placeholders and pass"
                " (job['id'], job['name']) as parameters, as the step does.",
    "swallowed": f"{UNIT2}: do not catch the error and acknowledge anyway; let it propagate, so"
                 " the delivery stays unacknowledged and RabbitMQ delivers it again.",
    "connection": f"{UNIT2}: use the channel handle() is given as it is: acknowledge once with"
                  " ch.basic_ack(delivery.delivery_tag) and do not close the channel.",
    "raised": "python3 worker.py shows the error's whole traceback: fix the line of handler.py"
              " it names, and let errors propagate so that RabbitMQ delivers the job again.",
    "error": f"{UNIT3}: re-copy the handler from the step, keeping its 4-space indentation;"
             " python3 worker.py shows the full error.",
    "stuck": f"{UNIT3}: handle() must return; re-copy the handler from the step.",
    "partial": f"{UNIT3}: write the completion key and the ticket in the same `with db:` block,"
               " so they commit together or not at all.",
    "duplicate": f"{UNIT3}: record job['id'] with INSERT OR IGNORE INTO completed in the ticket's"
                 " transaction, and write the ticket only when its rowcount is 1.",
    "same-name": f"{UNIT3}: a registration is identified by job['id']; two guests may share a"
                 " name and each needs a ticket.",
    "completion-key": f"{UNIT3}: record job['id'] in the completed table; delivery.delivery_tag"
                      " only numbers the deliveries of one worker run and starts at 1 again.",
    "skipped": f"{UNIT3}: a redelivered job may never have been finished; let the completion key"
               " in the database decide, not delivery.redelivered.",
    "grader": "This is a problem of the grader or its broker, not of handler.py; run it again.",
    "limits": "handler.py runs in a sandbox with limits on memory, processes, CPU time, file size"
              " and disk; writing one ticket and acknowledging stays far below them, so look for"
              " what handle() does besides.",
    "unique-key": f"{UNIT3}: job['id'] alone identifies a registration: a UNIQUE index keeping"
                  " one ticket per registration goes on tickets(registration_id), never on the"
                  " name or a part of the ID.",
    "schema": f"{UNIT3}: through `db`, handler.py may write the lab's tables and add tables and"
              " indexes of its own; it may not change the columns of the lab's tables, create a"
              " view or a trigger, add an index that refuses the site's registrations, or touch"
              " the lab's files.",
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


# What a learner reads when the machine, not handler.py, kept a trial from its verdict.
TOO_BUSY = "the grading machine was too busy"
# What a worker that could not even reach the grader's own broker leaves on stderr.
UNREACHED = ("Cannot reach RabbitMQ", "AMQPConnector", "AMQP handshake")


class TooBusy(Exception):
    """The machine starved a worker run (processes.OwnClock): this trial says nothing of handler.py."""


def too_busy(run, what):
    return TooBusy(f"{TOO_BUSY}: {what}, the worker got too little CPU to finish within"
                   f" {run.time_limit:g} s of its own time")


class NotApplicable(Exception):
    """This way of interrupting does not apply to the handler (the reason says why)."""


@dataclass
class Result:
    name: str
    passed: bool
    reason: str
    hint: str = ""
    story: dict = None  # a failed check's {"deliveries", "found", "story"} (trial_story.py)

    def __post_init__(self):
        self.reason = shorten(self.reason, REASON_LIMIT)
        self.hint = shorten(self.hint, REASON_LIMIT)

    @classmethod
    def from_dict(cls, check):
        """A Result from the grader's JSON (as a container's grader printed it)."""
        story = {key: check[key] for key in ("deliveries", "found", "story") if key in check}
        return cls(check["name"], check["passed"], check["reason"], check["hint"], story or None)

    def as_dict(self):
        out = {"name": self.name, "passed": self.passed, "reason": self.reason, "hint": self.hint}
        if self.story:
            out.update(self.story)
        return out


# ---- reading a worker run ----------------------------------------------------------


def describe_error(event):
    """'OperationalError (handler.py line 9): near "Neill": syntax error' from an event."""
    text = event["type"]
    if event.get("where"):
        text += f" ({event['where'].replace(':', ' line ')})"
    return text + (f": {event['message']}" if event.get("message") else "")


def name_text(name):
    """A guest's name for a reason: quoted, its start only when it is long."""
    return repr(shorten(name, NAME_LIMIT, mark="…"))


def _quoted_name(run, registration_id):
    for event in run.events:
        if event["event"] == "received" and event["id"] == registration_id:
            if "'" in event["name"] or '"' in event["name"]:
                return event["name"]
    return None


def run_problem(run, what):
    """(reason, hint) when the worker did not finish a delivery normally, else None."""
    if run.limits_hit:  # seen by the sandbox itself, not reported by the run
        return (f"{what}: handler.py ran into {' and '.join(run.limits_hit)} in the grader's"
                " sandbox, and the worker was stopped or failed", "limits")
    stray = run.events.stray_settlement()
    if stray is not None:
        # RabbitMQ closes the channel for it, sooner or later, and the worker may then fail
        # or hang in any way: this is the cause, whatever the exit.
        unsettled = [rid for rid, _ in run.events.received() if run.events.settlement(rid) is None]
        tag = (f"delivery tag {stray['tag']}, which no delivery of this worker run had" if stray["tag"]
               else "no delivery tag (so with tag 0, which no delivery has)")
        return (f"{what}: handler.py called {settle_call(stray)} with {tag}, so"
                f" {' and '.join(unsettled) or 'its delivery'} was never acknowledged", "no-ack")
    elsewhere = run.events.first("ack-elsewhere")
    if elsewhere and not run.events.first("ack"):
        return (f"{what}: handler.py called basic_ack on a channel other than `ch`, the one that"
                " delivered the job; a delivery tag counts only on its own channel, so the"
                " delivery was never acknowledged", "connection")
    if run.timed_out:
        if run.starved:
            raise too_busy(run, what)
        return (f"{what}: the worker did not finish within {run.time_limit:g} s, so it was stopped;"
                " handler.py seems stuck (an endless loop?)", "stuck")
    loaded = run.events.first("load-failed")
    if loaded:
        return f"handler.py could not be loaded: {describe_error(loaded)}", "error"
    if run.events.first("double-ack"):
        return (f"{what}: handler.py acknowledged the delivery twice (RabbitMQ closes the"
                " channel on the second ack: PRECONDITION_FAILED, unknown delivery tag)",
                "double-ack")
    lost = run.events.first("connection-lost")
    if lost:
        return (f"{what}: RabbitMQ's channel was gone when handler.py called {lost['during']}"
                f" ({describe_error(lost)})", "connection")
    raised = run.events.first("raised")
    if raised:
        reason = f"{what}: handler.py raised {describe_error(raised)}"
        name = _quoted_name(run, raised["id"])
        if raised["type"] == "OperationalError" and name:
            return (f"{reason}; the guest's name {name_text(name)} holds a quote, which breaks"
                    " SQL that has the name pasted into its text", "sql-data")
        return reason, "raised"
    if run.events.first("no-ack"):
        return (f"{what}: handler.py returned without acknowledging the delivery, so RabbitMQ"
                " still holds it and would deliver it again", "no-ack")
    if run.events.first("transaction-open"):
        return (f"{what}: handler.py left a transaction open and its writes were rolled back"
                " (the writes belong inside `with db:`)", "no-ticket")
    if run.events.first("pause-not-reached"):
        return None  # the caller decides what a missing checkpoint means
    if run.returncode != 0:
        tail = [line for line in run.stderr.splitlines() if line.strip()]
        if (not run.events.received() and tail
                and any(text in tail[-1] for text in UNREACHED)):  # before handler.py had a job
            raise TooBusy(f"{TOO_BUSY}: {what}, the worker could not connect to the grading"
                          f" broker ({shorten(tail[-1].strip(), 120)})")
        detail = f"its last error line: {tail[-1].strip()}" if tail else "no error message"
        return f"{what}: the worker exited with status {run.returncode} ({detail})", "error"
    return None


def fail_on_problem(run, what):
    problem = run_problem(run, what)
    if problem:
        raise Fail(*problem)


def settle_call(event):
    """How handler.py settled a delivery: 'basic_nack(requeue=False)', 'basic_ack'."""
    if event["event"] == "ack":
        return "basic_ack"
    return f"basic_{event['event']}(requeue={event.get('requeue', True)})"


def dead_letters(event):
    return event is not None and event["event"] != "ack" and not event.get("requeue", True)


def loss_cause(run, registration_id):
    """Why the delivery will not come back: settled too early, or dead-lettered; None if not settled."""
    settled = run.events.settlement(registration_id)
    if settled is None or not (settled["event"] == "ack" or dead_letters(settled)):
        return None
    how = ("acknowledged" if settled["event"] == "ack"
           else f"rejected with {settle_call(settled)}")
    before = run.events.kinds()[:run.events.index(settled)]
    if "before-write" not in before:
        return f"it was {how} before its ticket was written"
    if "after-commit" not in before:
        return f"it was {how} before the transaction writing its ticket committed"
    return f"it had already been {how}"


def not_back(lab, registration_id, run, how):
    """The Fail for a delivery that did not come back to the queue after an interruption."""
    cause = loss_cause(run, registration_id) or "RabbitMQ did not deliver it again in time"
    outcome = ("it has no ticket" if not lab.tickets(registration_id)
               else "its ticket exists only because the worker got past the write first")
    if lab.dead_lettered():
        return Fail(f"{registration_id} was dead-lettered: {cause}, so after {how} RabbitMQ"
                    f" moved it to the dead-letter queue instead of delivering it again;"
                    f" {outcome}", "dead-letter")
    return Fail(f"{registration_id} was lost: {cause}, so after {how} RabbitMQ had nothing to"
                f" deliver again; {outcome}", "lost")
