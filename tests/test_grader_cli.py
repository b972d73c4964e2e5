"""The grader end to end, as `python -m grader` and `make grade-local`: its own broker,
Ctrl+C, a killed grader, a missing handler, NIGHTJAR_WORKSTATION and exit statuses."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from graderkit import WRONG, grade
from labkit import (HANDLERS, ROOT, on_a_terminal, processes_in_control_groups,
                    processes_mentioning as _processes_mentioning)
from sitekit import free_port
from nightjar.config import redact_url
from nightjar.harness.rabbitnode import PrivateNode


# ---- end to end: the grader's own broker ------------------------------------------------


def test_end_to_end_with_its_own_broker(tmp_path):
    # (Not the grading node of a make local running in this checkout.)
    env = dict(os.environ, TMPDIR=str(tmp_path), NIGHTJAR_LOCAL_VAR=str(tmp_path / "var"))
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(HANDLERS["unit3"]), "--skip-live"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert ("(a private RabbitMQ node, throwaway databases, handler.py sandboxed;"
            " live results skipped)") in lines
    assert sum(line.startswith("PASS  ") for line in lines) == 6
    assert lines[-1] == "All 6 checks passed."
    assert elapsed < 60
    # The node and every temporary file are gone.
    assert list(tmp_path.iterdir()) == []


def sandboxed_by(grader, *within):
    """Every process in the grader's sandbox (its control groups' names start with its PID):
    the root's holder, the launcher, the workers, whatever they started."""
    return processes_in_control_groups(f"/nightjar-sandbox/{grader.pid}-", *within)


def workers_of(grader):
    """The grader's worker processes: those in its sandbox's trials (a worker the launcher
    forked shows the launcher's command line) or, not sandboxed, those whose effects watcher
    names the grader's PID."""
    return sorted({*sandboxed_by(grader, "/trial-"),
                   *_processes_mentioning("nightjar.harness.effects", f"--parent\0{grader.pid}\0")})


def grading_an_endless_loop(tmp_path, **output):
    """The grader on a handler that never returns, once its workers spin (so its node is up too)."""
    grader = subprocess.Popen(
        [sys.executable, "-m", "grader", "--handler", str(WRONG / "endless_loop.py"),
         "--skip-live"], cwd=ROOT, text=True,
        env=dict(os.environ, TMPDIR=str(tmp_path), NIGHTJAR_LOCAL_VAR=str(tmp_path / "var")),
        start_new_session=True, **output)
    deadline = time.monotonic() + 90
    while not workers_of(grader):
        if grader.poll() is not None or time.monotonic() > deadline:
            os.killpg(grader.pid, signal.SIGKILL)
            pytest.fail("the grader's workers never started (status"
                        f" {grader.wait()}): {grader.communicate()[1] or ''}")
        time.sleep(0.1)
    return grader


def test_ctrl_c_stops_the_private_broker_and_the_workers(tmp_path):
    grader = grading_an_endless_loop(tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _processes_mentioning(f"{tmp_path}/nightjar-grader-", "beam")  # the private node
        grader.send_signal(signal.SIGINT)
        _, err = grader.communicate(timeout=30)
    finally:
        if grader.poll() is None:
            os.killpg(grader.pid, signal.SIGKILL)
    assert grader.returncode == 130
    assert "Grading interrupted" in err
    time.sleep(0.2)
    assert _processes_mentioning(str(tmp_path)) == [] and workers_of(grader) == []
    assert sandboxed_by(grader) == []
    assert list(tmp_path.iterdir()) == []


def test_a_killed_grader_leaves_no_broker_workers_or_files(tmp_path):
    grader = grading_an_endless_loop(tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    grader.kill()  # SIGKILL: no finally block runs in the grader
    grader.wait()
    deadline = time.monotonic() + 10
    while (_processes_mentioning(str(tmp_path)) or sandboxed_by(grader) or workers_of(grader)
           or list(tmp_path.iterdir())):
        assert time.monotonic() < deadline, (_processes_mentioning(str(tmp_path)), sandboxed_by(grader),
                                             workers_of(grader), list(tmp_path.iterdir()))
        time.sleep(0.1)


def test_missing_handler_is_reported_not_crashed(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(tmp_path / "handler.py"), "--skip-live",
         "--json"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["passed"] is False and "no handler.py at" in report["error"]


def test_the_grader_grades_the_workstation_folder_of_nightjar_workstation(tmp_path):
    """The handler.py the unit scripts check (NIGHTJAR_WORKSTATION), not another one."""
    folder = tmp_path / "my-desk"
    env = dict(os.environ, NIGHTJAR_WORKSTATION=str(folder))
    result = subprocess.run([sys.executable, "-m", "grader", "--skip-live", "--json"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert json.loads(result.stdout) == {
        "passed": False, "error": f"no handler.py at {folder / 'handler.py'}", "checks": []}


@pytest.mark.parametrize("case", ["checks failed", "cannot grade"])
def test_make_grade_local_names_the_graders_own_exit_status(grading_broker, tmp_path, case):
    """GNU make exits 2 for any failing recipe; the last lines keep 1 and 2 apart."""
    if case == "checks failed":
        status, args = 1, f"--handler {HANDLERS['unit2']} {' '.join(grading_broker.args)}"
    else:
        status, args = 2, f"--handler {tmp_path / 'handler.py'}"
    # As typed in a shell, not as a sub-make of `make test`.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    result = subprocess.run(
        ["make", "--no-print-directory", "grade-local", f"GRADE_ARGS=--skip-live {args}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    said, made = result.stderr.splitlines()[-2:]
    assert said == f"The grader exited with status {status} ({case})."
    assert re.fullmatch(rf"make: \*\*\* \[Makefile:\d+: grade-local\] Error {status}", made), made


def grader_text(handler, broker, stdout):
    """The grader's text output for handler on broker, its stdout a file or a terminal."""
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(handler), "--skip-live", *broker.args],
        cwd=ROOT, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "NO_COLOR"})
    assert result.returncode == 1, result.stderr


def test_a_failed_checks_story_is_under_it_styled_on_a_terminal_plain_when_piped(
        grading_broker, tmp_path):
    handler = HANDLERS["unit2"]
    _, report = grade(handler, "--skip-live", broker=grading_broker)
    piped = tmp_path / "piped.txt"
    with open(piped, "w", encoding="utf-8") as out:
        grader_text(handler, grading_broker, out)
    on_terminal = on_a_terminal(lambda fd: grader_text(handler, grading_broker, fd))

    def transcript(fail, dim):
        """The whole output, from the JSON report's checks: a story under each FAIL line."""
        lines = [f"Grading {handler}", "(grading broker " + redact_url(grading_broker.url)
                 + ", throwaway databases, handler.py sandboxed; live results skipped)", ""]
        for check in report["checks"]:
            lines += [f"{'PASS' if check['passed'] else fail}  {check['name']}",
                      f"      {check['reason']}"]
            if not check["passed"]:
                lines += [f"      Hint: {check['hint']}", "      What happened in the trial that failed:",
                          *(dim(f"        {line}") for line in check["story"])]
        passed = sum(check["passed"] for check in report["checks"])
        return "\n".join([*lines, "", f"{passed} of 6 checks passed.", ""])

    def colour(text, code):
        return f"\x1b[{code}m{text}\x1b[0m"

    failed = [check for check in report["checks"] if not check["passed"]]
    assert len(failed) == 2 and all(check["story"] for check in failed)
    assert piped.read_text(encoding="utf-8") == transcript("FAIL", lambda line: line)
    assert on_terminal == transcript(colour("FAIL", "1;31"), lambda line: colour(line, "2")).replace(
        "\nPASS  ", "\n" + colour("PASS", "32") + "  ")


# ---- where handler.py runs: the sandbox's route ------------------------------------------------


@pytest.mark.parametrize("argv, root, docker, route", [
    (["--handlers", "class"], True, False, "linux"),
    (["--handlers", "class"], False, True, "docker"),
    (["--handlers", "class", "--trusted"], True, True, None),
    (["--handler", "h.py"], True, False, "linux"),       # Gradescope runs it as root
    (["--handler", "h.py"], False, True, None),          # a learner's own code, as make grade runs it
    (["--handler", "h.py", "--sandbox", "docker"], False, True, "docker"),
])
def test_the_sandbox_is_on_wherever_it_can_be(monkeypatch, argv, root, docker, route):
    from grader import cli
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0 if root else 1000)
    monkeypatch.setattr(cli.sandboxing, "unavailable_reason", lambda: None if root else "no root")
    monkeypatch.setattr(cli, "_docker_answers", lambda: docker)
    assert cli.choose_sandbox(cli.parse_options(argv)) == route


def test_a_class_without_root_or_docker_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    from grader import cli
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cli, "_docker_answers", lambda: False)
    assert cli.main(["--handlers", str(tmp_path)]) == 2
    assert capsys.readouterr() == ("", (
        "Cannot grade: a class is graded in a sandbox, which needs root (Linux's own mechanisms) or"
        " a Docker engine; pass --trusted to grade without a sandbox (only code you trust)\n"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the Linux route is tried as root only")
def test_a_sandbox_that_cannot_be_set_up_is_one_line_and_status_2(tmp_path):
    """As root, but without util-linux's tools on PATH; Gradescope's results.json is written all the same."""
    (tmp_path / "handler.py").write_text(HANDLERS["unit3"].read_text())
    result = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(tmp_path / "handler.py"), "--skip-live",
         "--gradescope", str(tmp_path / "results.json")], cwd=ROOT,
        env=dict(os.environ, PATH="/nonexistent"), capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == ("Cannot grade: the sandbox needs nsenter, setpriv, prlimit, sh"
                             " (util-linux); pass --trusted to grade without a sandbox (only code"
                             " you trust)\n")
    assert "Not graded: the sandbox needs" in json.loads((tmp_path / "results.json").read_text())["output"]


# ---- not graded: the grader's own trouble is no verdict --------------------------------------


def test_a_broker_that_dies_mid_grading_leaves_the_handler_not_graded(tmp_path):
    node = PrivateNode().start()
    try:
        node.wait_ready()
        grader = subprocess.Popen(
            [sys.executable, "-m", "grader", "--handler", str(HANDLERS["unit3"]), "--skip-live",
             "--amqp-url", node.url, "--management-url", node.management_url,
             "--gradescope", str(tmp_path / "results.json")],
            cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp_path)), text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 60
        while not workers_of(grader) and grader.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers_of(grader), "the grader's workers never started"
    finally:
        node.stop()  # as a crash would: the checks are under way
    out, err = grader.communicate(timeout=120)
    # A correct handler: had the broker lived, every check would pass.
    assert (grader.returncode, out) == (2, "")
    assert err == ("Cannot grade: the grading broker stopped answering while the checks ran;"
                   " that is the grader's trouble, not handler.py's: grade it again\n")
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["tests"] == [] and results["output"] == "Not graded: " + err[14:-1]


def test_ask_waits_for_a_grading_service_that_is_not_listening_yet(grading_broker, tmp_path):
    """make grade asks a grader container as soon as it runs: its service may still be starting."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    ask = subprocess.Popen([sys.executable, "-m", "grader.service", "--ask", url], cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)  # the question is refused, and asked again, meanwhile
    service = subprocess.Popen(
        [sys.executable, "-m", "grader.service", "--listen", f"127.0.0.1:{port}", "--",
         "--handler", str(HANDLERS["unit3"]), "--skip-live", *grading_broker.args],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        out, err = ask.communicate(timeout=120)
    finally:
        service.kill()
        service.wait()
    assert (ask.returncode, err) == (0, "")
    assert out.splitlines()[-1] == "All 6 checks passed."
