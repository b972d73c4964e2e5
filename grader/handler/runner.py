"""Running the checks: every variant in a throwaway lab of its own, concurrently, combined into one Result per check."""

import threading
import time
import traceback
from pathlib import Path

from nightjar import broker
from nightjar.config import Settings
from nightjar.events import shorten
from nightjar.harness import processes
from nightjar.harness.lab import Lab, compile_packages, copy_workstation
from nightjar.sandbox import Tampered

from . import trial_story as story
from .checks import CHECKS
from .findings import HINTS, REASON_LIMIT, Fail, NotApplicable, Result, TooBusy


STOP_WAIT = 10.0  # seconds the running variants get to end once the grader is stopped
BUSY_TRIES = 3  # a trial the machine starved is run afresh, up to this many times in all


class NotGraded(Exception):
    """The grader could not carry out a check, so the submission has no verdict (not a fail)."""


def _run_variant(make_lab, check, key, function):
    """('pass'|'n/a'|'fail'|'busy'|'error', sentence, hint, story) for one variant; never raises.
    story: what happened in a failed trial (grader/handler/trial_story.py), else None.
    'busy': the machine starved the trial BUSY_TRIES times; 'error' is the grader's own
    trouble (a broker gone, a sandbox that broke). Neither is the handler's."""
    for attempt in range(1, BUSY_TRIES + 1):
        outcome = _run_trial(make_lab, f"c{check.number}-{key}" + (f"-{attempt}" if attempt > 1 else ""),
                             function)
        if outcome[0] != "busy" or processes.Running.stopping:
            break
    return outcome


def _run_trial(make_lab, label, function):
    lab = None
    try:
        lab = make_lab(label)
        return "pass", function(lab), "", None
    except NotApplicable as note:
        return "n/a", str(note), "", None
    except Fail as failure:
        return "fail", failure.reason, HINTS.get(failure.hint, failure.hint), story.tell(lab)
    except TooBusy as busy:
        return "busy", str(busy), "", None
    except Tampered as tampered:  # its story says where the database could not be read
        return "fail", str(tampered), HINTS["schema"], story.tell(lab)
    except Exception as error:  # the grader's own trouble: say so, never crash
        return "error", traceback.format_exception_only(type(error), error)[-1].strip(), "", None
    finally:
        if lab is not None:
            try:
                lab.cleanup()
            except Exception:
                pass


def combine(check, outcomes):
    """One Result from the variants' outcomes, in the check's variant order.

    A trial that failed decides, whatever the others did; with none failed, a
    trial the grader could not carry out leaves the check undecided: NotGraded.
    """
    failures = [(text, hint, told) for status, text, hint, told in outcomes if status == "fail"]
    if failures:
        reason, hint, told = failures[0]
        more = ""
        if len(failures) == 2:
            more = " (one more of this check's trials failed too)"
        elif len(failures) > 2:
            more = f" ({len(failures) - 1} more of this check's trials failed too)"
        reason = shorten(reason, REASON_LIMIT - len(more)) + more
        return Result(check.name, False, _sentence(reason), hint, told)
    busy = [text for status, text, *_ in outcomes if status == "busy"]
    if busy:  # (its text starts with findings.TOO_BUSY)
        raise NotGraded(f"{busy[0]} (check {check.number}, tried {BUSY_TRIES} times)")
    errors = [text for status, text, *_ in outcomes if status == "error"]
    if errors:
        raise NotGraded(f"the grader could not carry out check {check.number} ({check.name}):"
                        f" {errors[0]}")
    passed = [text for status, text, *_ in outcomes if status == "pass"]
    notes = [text for status, text, *_ in outcomes if status == "n/a"]
    reason = check.success.format(hows="; ".join(passed))
    if notes:
        reason += " (" + "; ".join(notes) + ")"
    return Result(check.name, True, _sentence(reason), "")


def _sentence(text):
    if text.startswith(("handler.py", "worker.py")):
        return text
    return text[:1].upper() + text[1:]


def run_checks(make_lab, checks=CHECKS, parallel=None):
    """Every variant of every check, concurrently; [Result] in check order.
    Raises NotGraded when some check could not be decided."""
    tasks = [(check, key, function) for check in checks for key, function in check.variants]
    outcomes = {}
    limit = threading.Semaphore(parallel or len(tasks))

    def work(index, check, key, function):
        with limit:
            if not processes.Running.stopping:
                outcomes[index] = _run_variant(make_lab, check, key, function)

    threads = [threading.Thread(target=work, args=(i, *task), daemon=True)
               for i, task in enumerate(tasks)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)
    except BaseException:
        # Ctrl+C: the variants still running must end before the caller takes
        # the sandbox and the broker away under them (or they leave files behind).
        processes.stop_starting()
        processes.kill_all()
        deadline = time.monotonic() + STOP_WAIT
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        raise
    results = []
    for check in checks:
        mine = [outcomes[i] for i, task in enumerate(tasks) if task[0] is check]
        results.append(combine(check, mine))
    return results


def grade_handler(handler, amqp_url, scratch, *, queue_prefix="nightjar.grader", timeout=10.0,
                  delete_queues=True, checks=CHECKS, sandbox=None):
    """[Result] of checks for one handler.py on the broker at amqp_url.

    Each variant gets its own queue (named queue_prefix.<random>.<variant>)
    and its own database under the folder `scratch`; delete_queues removes
    the queues afterwards (not needed on a private node thrown away whole).
    sandbox: a started sandbox.Sandbox; every variant then runs in a trial of
    it, on the submission's own vhost (amqp_url then only tells whether the broker
    still answers).
    """
    scratch = Path(scratch)
    compile_packages()
    if sandbox is not None:
        workstation = sandbox.workstation(handler)

        def make_lab(label):
            return Lab(sandbox.tenant_admin_url, workstation=workstation, trial=sandbox.trial(),
                       queue_prefix=queue_prefix, worker_timeout=timeout)
    else:
        workstation = copy_workstation(scratch / "workstation", handler)  # one copy for every lab

        def make_lab(label):
            return Lab(amqp_url, folder=scratch / "labs" / label, workstation=workstation,
                       queue_prefix=queue_prefix, label=label, delete_queues=delete_queues,
                       worker_timeout=timeout)

    # A broker that died takes workers and the grader down with it: what failed then is
    # no verdict on handler.py.
    broker_lost = "the grading broker stopped answering while the checks ran"
    try:
        results = run_checks(make_lab, checks)
    except NotGraded:
        if not _answers(amqp_url):
            raise NotGraded(broker_lost) from None
        raise
    if not all(r.passed for r in results) and not _answers(amqp_url):
        raise NotGraded(broker_lost)
    return results


def _answers(amqp_url):
    try:
        broker.connect(Settings(amqp_url, "", "")).close()
        return True
    except broker.BrokerUnavailable:
        return False
