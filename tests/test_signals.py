"""The class page's signals (course/signals.py) from labs' events as the service applies them
(course/live.py): plain data, no hub. The course's own tests (test_course.py) see them on the page."""

import json
import re
from pathlib import Path

import pytest
import tornado.web

from course import live, signals

ROOT = Path(__file__).resolve().parents[1]
T = 1_800_000_000.0  # a moment; every event below is seconds after it


def learner(*events):
    """A learner's facts after these events, as the service keeps them."""
    found = live.Learner()
    for event in events:
        found.apply(live.checked(event, T + 10_000))
    return found.facts


def setup(unit, at=0):
    return {"kind": "setup", "unit": unit, "time": T + at}


def delivery(registration, token, at, ending=None, redelivered=False, committed=None, **more):
    """A delivery's records as the lab's history has them: received, then how it ended."""
    records = [{"kind": "delivery", "event": "received", "registration": registration, "delivery": token,
                "time": T + at, "redelivered": redelivered}]
    if ending or committed:
        records.append({"kind": "delivery", "event": ending or "ack", "registration": registration,
                        "delivery": token, "time": T + at + 0.5, "committed": committed or [], **more})
    return records


def kinds(facts, medians=None, at=60):
    return [(s["kind"], s["unit"], s["registration"]) for s in signals.of(facts, medians or {}, T + at)]


def test_a_handler_raising_on_every_delivery_names_its_registration():
    facts = learner(setup("2"), *[record for n in range(3) for record in
                                  delivery("R-0042", f"d{n}", 10 + n * 20, "raised", n > 0,
                                           type="ValueError", message="boom")])
    [found] = signals.of(facts, {}, T + 100)
    assert found == {"kind": "handler-raises", "unit": "2", "registration": "R-0042",
                     "text": "handler.py raised on R-0042 3 times in a row, in 40 s", "since": T + 10}
    # Two raises, then a good delivery: no signal.
    assert kinds(learner(setup("2"), *delivery("R-0042", "a", 1, "raised"), *delivery("R-0042", "b", 2, "raised"),
                         *delivery("R-0042", "c", 3, committed=[5]))) == []


def test_the_learners_own_ctrl_c_in_unit_2_is_the_lesson_not_a_signal():
    """Interrupted at before-write again and again: each redelivery follows the learner's Ctrl+C."""
    events = [setup("2")]
    for n in range(5):
        events += delivery("R-0002", f"d{n}", 10 + n * 10, "interrupted", redelivered=n > 0)
    events += delivery("R-0002", "last", 80, redelivered=True, committed=[2])
    assert kinds(learner(*events)) == []


def test_a_redelivery_loop_with_no_ticket():
    events = [setup("2")]
    for n in range(4):
        events += delivery("R-0007", f"d{n}", 10 + n, "no-ack", redelivered=n > 0)
    assert kinds(learner(*events)) == [("redelivery-loop", "2", "R-0007")]
    assert signals.of(learner(*events), {}, T + 60)[0]["text"] == "R-0007 delivered 4 times with no ticket"


def test_a_duplicate_ticket_unless_it_came_after_the_learners_ctrl_c_in_unit_3():
    duplicate = learner(setup("3"), *delivery("R-0040", "a", 1, committed=[4]),
                        *delivery("R-0040", "b", 5, committed=[5]))
    assert kinds(duplicate) == [("duplicate-ticket", "3", "R-0040")]
    assert signals.of(duplicate, {}, T + 60)[0]["text"] == "R-0040 has 2 tickets: 4, 5"
    lesson = learner(setup("3"), *delivery("R-0040", "a", 1, "interrupted", committed=[4]),
                     *delivery("R-0040", "b", 5, redelivered=True, committed=[5]))
    assert kinds(lesson) == []
    # Repaired and checked: a passed Check after it ends the signal.
    fixed = learner(setup("3"), *delivery("R-0040", "a", 1, committed=[4]), *delivery("R-0040", "b", 5, committed=[5]),
                    {"kind": "check", "unit": "3", "passed": True, "time": T + 30})
    assert kinds(fixed) == []


def test_the_same_check_failing_with_the_same_missing_line():
    missing = "missing: a registration named Ada with one ticket"
    checks = [{"kind": "check", "unit": "1", "passed": False, "missing": missing, "time": T + n} for n in (5, 9, 12)]
    assert kinds(learner(setup("1"), *checks)) == [("check-repeats", "1", None)]
    other = dict(checks[1], missing="missing: an empty queue")
    assert kinds(learner(setup("1"), checks[0], other, checks[2])) == []


def test_idle_far_above_the_class_median():
    facts = learner(setup("2"))
    limit = max(signals.MIN_ON_UNIT_SECONDS, signals.MEDIAN_FACTOR * 900)
    assert kinds(facts, {"2": 900}, limit - 1) == []
    assert kinds(facts, {"2": 900}, limit + 1) == [("stuck-idle", "2", None)]
    busy = learner(setup("2"), {"kind": "active", "time": T + limit - 10})
    assert kinds(busy, {"2": 900}, limit + 1) == []
    # The median: from setting a unit up to passing its Check.
    done = learner(setup("2", 0), {"kind": "check", "unit": "2", "passed": True, "time": T + 600})
    assert signals.medians([done, facts]) == {"2": 600}


def test_what_several_learners_share():
    found = {"ada": [signals.signal("duplicate-ticket", "3", "R-0040", "", T)],
             "bob": [signals.signal("duplicate-ticket", "3", "R-0041", "", T)],
             "cy": [signals.signal("stuck-idle", "2", None, "", T)]}
    assert signals.shared(found) == [{"kind": "duplicate-ticket", "unit": "3", "count": 2,
                                      "learners": ["ada", "bob"], "text": "2 learners: a duplicate ticket in unit 3"}]


@pytest.mark.parametrize("body, status", [
    (b"not json", 400), (b'{"events": {}}', 400), (b'{"events": [{"kind": "sudo", "time": 1}]}', 400),
    (b'{"events": [{"kind": "setup", "time": 1, "unit": "<script>"}]}', 400),
    (json.dumps({"events": [{"kind": "active", "time": 1}] * 201}).encode(), 413),
    (b"x" * (live.BODY_LIMIT + 1), 413)])
def test_a_malformed_or_oversized_post_is_refused_with_its_status(body, status):
    with pytest.raises(tornado.web.HTTPError) as refused:
        live.parse(body, T)
    assert refused.value.status_code == status


def test_an_event_keeps_only_its_known_fields_and_no_future_time():
    [kept] = live.parse(json.dumps({"events": [{"kind": "setup", "unit": "2", "time": T + 99,
                                                "learner": "bob", "name": "bob"}]}).encode(), T)
    assert kept == {"kind": "setup", "unit": "2", "time": T}


def test_the_readme_and_the_class_page_give_every_signal_with_the_thresholds_signals_py_applies():
    thresholds = {
        "handler-raises": f"{signals.RAISE_STREAK} deliveries in a row",
        "redelivery-loop": f"{signals.LOOP_DELIVERIES} deliveries of one registration",
        "duplicate-ticket": "2 tickets",
        "check-repeats": f"{signals.CHECK_REPEATS} failed Checks",
        "stuck-idle": (f"idle {signals.IDLE_SECONDS // 60} min", f"{signals.MEDIAN_FACTOR} × the class's median",
                       f"{signals.MIN_ON_UNIT_SECONDS // 60} min at least"),
    }
    table = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| `([a-z-]+)` \| (.+?) \|", line)
        if found:
            table[found[1]] = found[2]
    assert set(table) == set(signals.WORDS), table
    for kind, wanted in thresholds.items():
        for part in (wanted,) if isinstance(wanted, str) else wanted:
            assert part in table[kind], (kind, part, table[kind])
    class_page = (ROOT / "docs" / "instructors" / "class-page.md").read_text(encoding="utf-8")
    assert all(f"| `{kind}`: " in class_page for kind in signals.WORDS)
