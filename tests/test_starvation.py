"""A machine too busy to grade bends no verdict: a correct handler passes or is not graded, never failed.

Some handlers of each kind are graded on a quiet machine, then again on one
CPU shared with busy processes (tests/starvekit.py), sandboxed, --trusted and
through a farm host: every verdict given is the quiet one, and a handler that
is not graded says the grading machine was too busy. A handler that starves
itself still fails with its own reason. A farm host puts back a job it was too
busy to grade, and the third too busy grading is the job's result.
benchmarks/starvation_bench.py grades every handler so, at every load.
"""

import json
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from farmkit import Host, collector, finished
from grader import farm
from grader.class_run import batch
from grader.farm import host as farm_host
from grader.handler.findings import TOO_BUSY
from graderkit import WRONG, grade, verdicts
from labkit import HANDLERS, ROOT
from nightjar import sandbox
from starvekit import Starved
from test_farm import farm_node, farm_url  # noqa: F401  (the farm's fixtures, used here too)

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason=f"graded in the sandbox: {sandbox.unavailable_reason()}")
needs_starving = pytest.mark.skipif(Starved.unavailable() is not None,
                                    reason=f"{Starved.unavailable()}")

# name -> (handler, the grader's options); the correct slow one (1 s a ticket) with a tighter limit.
HANDLED = {"unit3": (HANDLERS["unit3"], []), "unit2": (HANDLERS["unit2"], []),
           "correct/slow": (WRONG / "correct" / "slow.py", ["--timeout", "5"]),
           "ack_inside_transaction": (WRONG / "ack_inside_transaction.py", [])}
# At 30 a core, only the correct handler a time limit could fail (each handler more costs a minute
# or two of the suite; benchmarks/starvation_bench.py grades them all so).
STARVED = {"sandboxed": ["correct/slow"], "trusted": ["unit2", "ack_inside_transaction"]}
# A handler that starves itself: it sleeps past its time limit, whatever the machine does.
SLEEPS = '''import time


def handle(ch, delivery, job, db, pause):
    time.sleep(60)
'''


@pytest.fixture(scope="module")
def quiet(grading_broker):
    """Each handler graded on a quiet machine, two at a time (sandboxed, as root does)."""
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(HANDLED, pool.map(
            lambda name: grade(HANDLED[name][0], "--skip-live", *HANDLED[name][1],
                               broker=grading_broker), HANDLED)))


@needs_starving
@pytest.mark.parametrize("route, hogs, memory", [("sandboxed", 30, 0), ("trusted", 4, 1024)],
                         ids=["sandboxed-30-a-core", "trusted-4-a-core-and-memory-held"])
def test_a_starved_machine_bends_no_verdict(quiet, grading_broker, tmp_path, route, hogs, memory):
    """On a CPU shared with `hogs` busy processes (as at a load of 30 a core, where correct
    handlers were failed, or of 4 with memory held by another program), every verdict the
    grader gives is the quiet one: at most, a handler is not graded, the grading machine
    being too busy. A handler that sleeps past its time limit still fails, as stuck."""
    sleeps = tmp_path / "handler.py"
    sleeps.write_text(SLEEPS)
    runs = {name: HANDLED[name] for name in STARVED[route]}
    runs["sleeps"] = (sleeps, [])
    trusted = ["--trusted"] if route == "trusted" else []
    with Starved(hogs, memory) as corner:
        def grade_starved(name):
            handler, options = runs[name]
            result = corner.run([sys.executable, "-m", "grader", "--handler", str(handler), "--json",
                                 "--skip-live", *trusted, *options, *grading_broker.args],
                                timeout=600, cwd=ROOT)
            return result.returncode, json.loads(result.stdout)

        with ThreadPoolExecutor(2) as pool:
            again = dict(zip(runs, pool.map(grade_starved, runs)))
    for name in STARVED[route]:
        status, report = again[name]
        if status == 2:
            assert report["error"].startswith(TOO_BUSY), (name, report)
            continue
        assert verdicts(report["checks"]) == verdicts(quiet[name][1]["checks"]), name
        assert status == quiet[name][0], name
    status, report = again["sleeps"]
    assert status == 1, report
    assert report["checks"][0]["reason"] == (
        "The normal delivery of R-0002: the worker did not finish within 10 s, so it was stopped;"
        " handler.py seems stuck (an endless loop?)")


def make_class(folder, names):
    for name in names:
        (folder / name).mkdir(parents=True)
        shutil.copyfile(HANDLED[name][0], folder / name / "handler.py")
    return folder


@needs_starving
def test_a_starved_host_bends_no_verdict(quiet, farm_url, grading_broker, tmp_path):
    """A grading host on one CPU with 4 busy processes gives each handler its quiet verdict,
    or none, as too busy."""
    names = ["unit3", "ack_inside_transaction"]
    with Starved(4) as corner:
        host = Host(farm_url, "starved", grading_broker, "10", slots=2, popen=corner.popen)
        try:
            host.output.wait_for(r"^Connected to the farm broker")
            run = collector(make_class(tmp_path / "class", names), farm_url, tmp_path, "--json")
            status, out, err = finished(run, timeout=600)
        finally:
            host.stop()
    assert status in (1, 2), err
    for submission in json.loads(out)["submissions"]:
        if submission["status"] == farm.ERROR:
            assert submission["note"].startswith(TOO_BUSY), submission
        else:
            assert verdicts(submission["checks"]) == verdicts(quiet[submission["name"]][1]["checks"])


def test_a_job_its_host_is_too_busy_for_goes_back_and_the_third_try_is_its_result(
        farm_url, grading_broker, tmp_path, monkeypatch):
    """A grading the host's machine was too busy for is no verdict: the host puts the job back
    (for another host, or itself later), counting the tries, and the third too busy grading
    is what the batch gets. A host of this process's own, whose every grading is too busy."""
    graded = []

    def too_busy(graders, name, *args):
        graded.append(name)
        return batch.Submission(name, farm.ERROR, note=f"{TOO_BUSY}: the normal delivery of R-0002")

    monkeypatch.setattr(batch, "grade_one", too_busy)
    monkeypatch.setattr(farm_host, "BUSY_PAUSE", 0.1)
    options = farm_host.parse_options(["--farm", farm_url, "--slots", "1", "--name", "busy"])
    host = farm_host.Host(options, (grading_broker.url, grading_broker.management_url))
    serving = threading.Thread(target=host.serve, daemon=True)
    serving.start()
    try:
        run = collector(make_class(tmp_path / "class", ["unit3"]), farm_url, tmp_path, "--json")
        status, out, _ = finished(run, timeout=120)
    finally:
        host.stopping = True
        serving.join(timeout=30)
        shutil.rmtree(host.scratch, ignore_errors=True)
    assert graded == ["unit3"] * farm.BUSY_TRIES
    [submission] = json.loads(out)["submissions"]
    assert (status, submission["status"], submission["note"]) == (
        2, farm.ERROR, f"{TOO_BUSY}: the normal delivery of R-0002")
