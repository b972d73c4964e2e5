"""Signals of a learner who may need help, from what their lab did: plain data in, plain data out.

    found = signals.of(learner, medians, now)      # [{"kind", "unit", "registration", "text", "since"}]
    shared = signals.shared(every_learners_signals)  # [{"kind", "unit", "count", "text", "learners"}]

`learner` is a dict as course/live.py keeps it:

    {"unit": "2" | None, "unit_since": t, "passed": ["1", ...], "last_activity": t,
     "checks": [{"time", "unit", "passed", "missing"}],                  oldest first
     "deliveries": [{"registration", "token", "time", "redelivered", "unit",
                     "ending", "committed": [ticket numbers], "after_interrupt"}]}   oldest first

`medians` maps a unit to the class's median time (seconds) from setting it up to passing it.

Every rule and threshold is here, and docs/instructors/class-page.md says why each is what it is.
The lesson itself is never a signal: a delivery that follows the learner's own Ctrl+C (the
worker stopped with `interrupted`) is what units 2 and 3 ask for, so it counts neither towards a
redelivery loop nor as a duplicate ticket.
"""

import os
import statistics
from collections import Counter

# A redelivery loop: this many deliveries of one registration with no ticket committed between.
LOOP_DELIVERIES = 4
# A handler raising on every delivery: this many deliveries in a row that ended with an exception.
RAISE_STREAK = 3
# The same Check failing: this many failed Checks in a row of one unit, with the same first line missing.
CHECK_REPEATS = 3
# Stuck and idle: on a unit this many times the class's median time for it, and no activity for
# IDLE_SECONDS; never before MIN_ON_UNIT_SECONDS (a class that has no median yet, a quick unit).
MEDIAN_FACTOR = 2
IDLE_SECONDS = int(os.environ.get("NIGHTJAR_COURSE_IDLE_SIGNAL_SECONDS") or 300)
MIN_ON_UNIT_SECONDS = 2 * IDLE_SECONDS

# Which kind of signal reads how, for one learner and for several ("7 learners: ...").
WORDS = {
    "handler-raises": "a handler raising on every delivery",
    "redelivery-loop": "a redelivery loop",
    "duplicate-ticket": "a duplicate ticket",
    "check-repeats": "the same Check failing",
    "stuck-idle": "idle, long on a unit",
}
# How urgent each is, for "needs help first" (lower first).
ORDER = {kind: position for position, kind in enumerate(WORDS)}


def of(learner, medians, now):
    """The learner's signals, most urgent first."""
    deliveries = learner.get("deliveries", [])
    found = raising(deliveries) + loops(deliveries) + duplicates(learner, deliveries)
    found += repeated_checks(learner) + idle(learner, medians, now)
    return sorted(found, key=lambda signal: (ORDER[signal["kind"]], signal["since"]))


def signal(kind, unit, registration, text, since):
    return {"kind": kind, "unit": unit, "registration": registration, "text": text, "since": since}


def raising(deliveries):
    """The last RAISE_STREAK deliveries (a Ctrl+C's aside) all ended with an exception."""
    ended = [d for d in deliveries if d["ending"] not in (None, "interrupted")]
    streak = []
    for delivery in reversed(ended):
        if delivery["ending"] != "raised":
            break
        streak.append(delivery)
    if len(streak) < RAISE_STREAK:
        return []
    last, first = streak[0], streak[-1]
    same = {d["registration"] for d in streak} == {last["registration"]}
    where = f"on {last['registration']}" if same else f"on {len({d['registration'] for d in streak})} registrations"
    return [signal("handler-raises", last["unit"], last["registration"],
                   f"handler.py raised {where} {len(streak)} times in a row, in {span(last['time'] - first['time'])}",
                   first["time"])]


def loops(deliveries):
    """A registration delivered LOOP_DELIVERIES times or more since its last ticket, none of them
    a redelivery after the learner's own Ctrl+C, and none raising (raising() says that better)."""
    found = []
    for registration, kept in by_registration(deliveries).items():
        since_ticket = []
        for delivery in kept:
            since_ticket = [] if delivery["committed"] else since_ticket + [delivery]
        counted = [d for d in since_ticket if not d["after_interrupt"] and d["ending"] != "raised"]
        if len(counted) >= LOOP_DELIVERIES:
            found.append(signal("redelivery-loop", counted[-1]["unit"], registration,
                                f"{registration} delivered {len(counted)} times with no ticket",
                                counted[0]["time"]))
    return found


def duplicates(learner, deliveries):
    """A registration that got a second ticket, not by a redelivery after the learner's own Ctrl+C
    (unit 3 shows that one on purpose), and no Check passed since."""
    passed_at = max([c["time"] for c in learner.get("checks", []) if c["passed"]], default=0)
    found = []
    for registration, kept in by_registration(deliveries).items():
        tickets = []
        for delivery in kept:
            for number in delivery["committed"]:
                tickets.append(number)
                if len(tickets) >= 2 and not delivery["after_interrupt"] and delivery["time"] > passed_at:
                    found.append(signal("duplicate-ticket", delivery["unit"], registration,
                                        f"{registration} has {len(tickets)} tickets:"
                                        f" {', '.join(str(n) for n in tickets)}", delivery["time"]))
                    break
            else:
                continue
            break
    return found


def repeated_checks(learner):
    """The last CHECK_REPEATS Checks of the learner's unit failed, each missing the same first thing."""
    unit = learner.get("unit")
    checks = [c for c in learner.get("checks", []) if c["unit"] == unit]
    last = checks[-CHECK_REPEATS:]
    if len(last) < CHECK_REPEATS or any(c["passed"] for c in last):
        return []
    missing = {c.get("missing") or "" for c in last}
    if len(missing) != 1 or not missing.pop():
        return []
    return [signal("check-repeats", unit, None,
                   f"Check failed {len(last)} times: {last[-1]['missing']}", last[0]["time"])]


def idle(learner, medians, now):
    """On a unit not passed yet far longer than the class, and idle."""
    unit, since = learner.get("unit"), learner.get("unit_since")
    if unit is None or since is None or unit in learner.get("passed", []):
        return []
    limit = max(MIN_ON_UNIT_SECONDS, MEDIAN_FACTOR * (medians.get(unit) or 0))
    quiet = now - (learner.get("last_activity") or since)
    if now - since < limit or quiet < IDLE_SECONDS:
        return []
    return [signal("stuck-idle", unit, None,
                   f"{span(now - since)} on unit {unit}, idle for {span(quiet)}", since)]


def medians(learners):
    """{unit: the class's median seconds from setting it up to passing its Check}."""
    times = {}
    for learner in learners:
        for unit, seconds in learner.get("unit_times", {}).items():
            times.setdefault(unit, []).append(seconds)
    return {unit: statistics.median(found) for unit, found in times.items()}


def shared(found):
    """What several learners share: found is {learner: [signal]}; the most shared first."""
    counts = Counter()
    who = {}
    for learner, signals in found.items():
        for kind, unit in {(s["kind"], s["unit"]) for s in signals}:
            counts[kind, unit] += 1
            who.setdefault((kind, unit), []).append(learner)
    return [{"kind": kind, "unit": unit, "count": count, "learners": sorted(who[kind, unit]),
             "text": f"{count} learners: {WORDS[kind]}" + (f" in unit {unit}" if unit else "")}
            for (kind, unit), count in sorted(counts.items(), key=lambda item: (-item[1], ORDER[item[0][0]]))
            if count >= 2]


def by_registration(deliveries):
    found = {}
    for delivery in deliveries:
        found.setdefault(delivery["registration"], []).append(delivery)
    return found


def span(seconds):
    """4 s, 3 min, 1 h 05 min."""
    seconds = int(max(0, seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
