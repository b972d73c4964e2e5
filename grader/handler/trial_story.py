"""A failed check's story: what happened to each delivery in the trial that failed, then what the grader found.

The same words as `desk.py history` (nightjar/history_render.py), e.g.

    run 1  python3 worker.py --pause after-commit: exit 130
           R-0002  redelivered=False  paused at after-commit  stopped by Ctrl+C
           tickets then: R-0002 #2
    run 2  python3 worker.py: exit 0
           R-0002  redelivered=True  called basic_ack  returned
           tickets then: R-0002 #2 #3
    found  R-0002 #2 #3; completed: none; in the queue: nothing; in the dead-letter queue: nothing

Only the registrations the trial's deliveries and queues concern are shown
(not the lab's seeded R-0001).

What the grader did (the command, Ctrl+C), exit statuses, tickets and the
queues are its own evidence. What a delivery did inside the worker (paused,
returned, called basic_ack) is the worker's record: it adds detail, never a
verdict, and it never says RabbitMQ took an ack: the found line says what
the queues hold, and an ack the worker recorded for a registration still
there is marked as one RabbitMQ never took.
"""

from nightjar.events import shorten

from grader import reports
from .findings import EFFECT_WHERE, describe_error, settle_call

# A forged or runaway events file must not make a story of megabytes.
DELIVERIES_SHOWN = 12
STEPS_SHOWN = 8
TEXT_LIMIT = 160
TICKETS_SHOWN = 8


def shown(text):
    """One line, printable, bounded: a worker's record may hold anything."""
    return shorten(reports.shown(str(text)), TEXT_LIMIT)


def tickets_of(tickets):
    """{registration ID: [ticket numbers]} from [registrations.Ticket]."""
    found = {}
    for ticket in tickets:
        found.setdefault(ticket.registration_id, []).append(ticket.number)
    return found


def record_run(lab, run, command, interrupted=None):
    """Keep what one watched worker run did, with the tickets committed once it ended."""
    try:
        tickets = tickets_of(lab.tickets())
    except Exception:  # an unreadable database is judged by the check's own reads
        tickets = None
    lab.story.append({"run": len(lab.story) + 1, "command": command, "ended": _exit(run),
                      "interrupted": interrupted, "events": run.events, "tickets": tickets})


def _exit(run):
    """How the run ended, as the grader saw it: 'exit 130', 'killed by signal 9', 'stopped after 10 s'."""
    if run.timed_out:
        return f"stopped after {run.time_limit:g} s"
    code = run.returncode
    return f"killed by signal {-code}" if code is not None and code < 0 else f"exit {code}"


def _deliveries(events, interrupted):
    """[{registration, redelivered, steps}] from one run's events, in order."""
    deliveries = []
    for event in events:
        kind = event["event"]
        if kind == "received":
            deliveries.append({"registration": shown(event["id"]),
                               "redelivered": event["redelivered"], "steps": []})
            continue
        if not deliveries:
            continue
        step = None
        if kind == "paused":
            step = f"paused at {event['point']}"
        elif kind == "stop":
            step = f"killed itself {EFFECT_WHERE.get(event['effect'], event['effect'])}"
        elif kind == "returned":
            step = "returned"
        elif kind == "raised":
            step = f"raised {describe_error(event)}"
        elif kind == "no-ack":
            step = "returned without an ack"
            if deliveries[-1]["steps"][-1:] == ["returned"]:
                deliveries[-1]["steps"].pop()
        elif kind == "transaction-open":
            step = "left a transaction open"
        elif kind in ("ack", "nack", "reject"):
            step = f"called {settle_call(event)}"
        elif kind == "ack-elsewhere":
            step = "called basic_ack on another channel"
        elif kind == "double-ack":
            step = "acknowledged twice"
        elif kind == "connection-lost":
            step = f"lost the connection during {event['during']}"
        if step:
            deliveries[-1]["steps"].append(shown(step))
    if deliveries and interrupted:
        deliveries[-1]["steps"].append(interrupted)
    for delivery in deliveries:
        if len(delivery["steps"]) > STEPS_SHOWN:
            left = len(delivery["steps"]) - STEPS_SHOWN
            delivery["steps"] = delivery["steps"][:STEPS_SHOWN] + [f"… {left} more steps"]
    return deliveries


def tell(lab):
    """The story of a failed trial: {"deliveries": [...], "found": {...}, "story": [lines]}
    (see the module's text), or None if it could not be told (a story adds detail; the
    verdict stands without it)."""
    try:
        return _tell(lab)
    except Exception:
        return None


def _tell(lab):
    deliveries = []
    for run in lab.story:
        told = _deliveries(run["events"], run["interrupted"]) or [
            {"registration": None, "redelivered": None, "steps": ["received nothing"]}]
        for delivery in told:
            deliveries.append({"run": run["run"], "command": run["command"], "ended": run["ended"],
                               **delivery, "tickets_after_run": run["tickets"]})
    facts = found(lab)
    # Only the registrations the trial's deliveries and queues concern (not the lab's seed).
    concerned = {d["registration"] for d in deliveries} | set(facts["queue"] or []) | set(
        facts["dead_letter_queue"] or [])
    for delivery in deliveries:
        delivery["tickets_after_run"] = _only(delivery["tickets_after_run"], concerned)
    facts["tickets"] = _only(facts["tickets"], concerned)
    if facts["completed"] is not None:
        facts["completed"] = [key for key in facts["completed"] if key in concerned]
    _unbelieved(deliveries, facts)
    if len(deliveries) > DELIVERIES_SHOWN:
        left_out = {"left_out": len(deliveries) - DELIVERIES_SHOWN + 1}
        deliveries = deliveries[:DELIVERIES_SHOWN - 2] + [left_out] + deliveries[-1:]
    told = {"deliveries": deliveries, "found": facts}
    told["story"] = lines(told)  # as text, for whoever shows it (reports, the lab console)
    return told


def _only(tickets, concerned):
    return None if tickets is None else {k: v for k, v in tickets.items() if k in concerned}


def _unbelieved(deliveries, facts):
    """An ack the worker recorded for a registration RabbitMQ still holds never reached it
    (a forged or failed ack): its last delivery says so, from the queue's own evidence."""
    still = set(facts["queue"] or []) | set(facts["dead_letter_queue"] or [])
    for registration_id in still:
        mine = [d for d in deliveries if d["registration"] == registration_id]
        if mine and any(step.startswith("called basic_ack") for step in mine[-1]["steps"]):
            mine[-1]["steps"].append(f"but RabbitMQ still holds {registration_id}: it never"
                                     " took that ack")


def found(lab):
    """What the trial left: tickets, completion keys, the queues (None where unreadable)."""
    facts = {}
    for key, read in (("tickets", lambda: tickets_of(lab.tickets())),
                      ("completed", lab.completed_keys), ("queues", lab.queued)):
        try:
            facts[key] = read()
        except Exception:
            facts[key] = None
    facts["queue"], facts["dead_letter_queue"] = facts.pop("queues") or (None, None)
    return facts


# ---- as text ---------------------------------------------------------------------------


def _tickets_text(tickets):
    if tickets is None:
        return "the database could not be read"
    if not tickets:
        return "no ticket"
    parts = []
    for registration_id, numbers in list(tickets.items())[:TICKETS_SHOWN]:
        parts.append(f"{shown(registration_id)} " + " ".join(f"#{n}" for n in numbers[:TICKETS_SHOWN]))
    return ", ".join(parts)


def lines(story):
    """The story ({"deliveries", "found"}) as text: a list of lines."""
    out, run = [], None  # run: the first delivery of the worker run being told
    for delivery in story["deliveries"]:
        if "left_out" in delivery:
            out.append(f"       … {delivery['left_out']} more deliveries")
            continue
        if run is None or delivery["run"] != run["run"]:
            if run is not None:
                out.append(f"       tickets then: {_tickets_text(run['tickets_after_run'])}")
            out.append(f"run {delivery['run']}  {delivery['command']}: {delivery['ended']}")
            run = delivery
        what = ("" if delivery["registration"] is None else
                f"{delivery['registration']}  redelivered={delivery['redelivered']}  ")
        out.append(f"       {what}{'  '.join(delivery['steps'])}".rstrip())
    if run is not None:
        out.append(f"       tickets then: {_tickets_text(run['tickets_after_run'])}")
    facts = story["found"]
    completed = ("could not be read" if facts["completed"] is None
                 else ", ".join(map(shown, facts["completed"][:TICKETS_SHOWN])) or "none")
    if facts["queue"] is None:
        queues = "the queues could not be read"
    else:
        queues = (f"in the queue: {', '.join(map(shown, facts['queue'])) or 'nothing'};"
                  f" in the dead-letter queue: {', '.join(map(shown, facts['dead_letter_queue'])) or 'nothing'}")
    out.append(f"found  {_tickets_text(facts['tickets'])}; completed: {completed}; {queues}")
    return out
