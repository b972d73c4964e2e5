"""Grading a class (python3 -m grader --handlers DIR): real brokers, real grader subprocesses.

The project's own right and wrong handlers are graded as a class (in the
sandbox, as root) and one by one --trusted on the same private node, and the
verdicts must agree: one handler, one verdict, whatever the route (the
correct handlers of tests/handlers/correct/ are compared in
tests/test_grader.py); submissions that
hang their grader or flood its output sit beside a good one; bad input is
refused in one line.
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor

import pika
import pytest
from playwright.sync_api import expect

from nightjar.harness.rabbitnode import PrivateNode
from browserkit import axe_results, needs_axe, needs_chromium
from graderkit import verdicts
from labkit import HANDLERS, ROOT, processes_mentioning

WRONG = ROOT / "tests" / "handlers"
# The submissions' folder names: spaces and non-ASCII letters are ordinary names.
# A name a spreadsheet would run as a formula and a page would read as markup stays text.
MARKUP = "=1+1 <img src=x onerror=alert(1)> O'Brien & co"  # a folder name: no slash
CLASS = {"李 雷": HANDLERS["starting"], "Ana López": HANDLERS["unit2"], "zoë": HANDLERS["unit3"],
         MARKUP: WRONG / "never_acks.py", **{path.stem: path for path in sorted(WRONG.glob("*.py"))}}
# The worker-run timeout for both ways (endless_loop waits it out in every check).
TIMEOUT = "10"


def grader(*args, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def make_class(folder, handlers):
    for name, handler in handlers.items():
        (folder / name).mkdir(parents=True)
        shutil.copyfile(handler, folder / name / "handler.py")
    return folder


@pytest.fixture(scope="module")
def both_ways(grading_broker, tmp_path_factory):
    """The class graded one by one (two at a time, --trusted) and as one batch (the class
    route: in the sandbox where it can be had), on the same node."""
    tmp = tmp_path_factory.mktemp("class")
    folder = make_class(tmp / "class", CLASS)
    reports = {"junit": tmp / "unit2.xml", "gradescope": tmp / "unit2.json",
               "html": tmp / "class.html", "csv": tmp / "class.csv"}

    def single(name):
        extra = ["--junit", str(reports["junit"]), "--gradescope", str(reports["gradescope"])] \
            if name == "Ana López" else []
        result = grader("--handler", str(folder / name / "handler.py"), "--skip-live", "--json",
                        "--trusted", *grading_broker.args, "--timeout", TIMEOUT, *extra)
        return result.returncode, json.loads(result.stdout)

    with ThreadPoolExecutor(2) as pool:
        singles = dict(zip(CLASS, pool.map(single, CLASS)))
    batch = grader("--handlers", str(folder), "--json", *grading_broker.args, "--jobs", "2",
                   "--timeout", TIMEOUT, "--junit", str(tmp / "class.xml"),
                   "--report", str(reports["html"]), "--csv", str(reports["csv"]))
    return singles, batch, ET.parse(tmp / "class.xml").getroot(), reports


def test_batch_verdicts_equal_single_runs(both_ways):
    singles, batch, _, _ = both_ways
    assert batch.returncode == 1, batch.stderr
    report = json.loads(batch.stdout)
    assert report["passed"] is False
    assert [s["name"] for s in report["submissions"]] == sorted(CLASS, key=str.casefold)
    for submission in report["submissions"]:
        status, single = singles[submission["name"]]
        assert submission["status"] == "graded"
        assert submission["passed"] is single["passed"] is (status == 0)
        assert verdicts(submission["checks"]) == verdicts(single["checks"]), submission["name"]
    # Not a vacuous class: the unit 3 solution passes, every wrong handler fails.
    passed = {s["name"] for s in report["submissions"] if s["passed"]}
    assert passed == {"zoë"}


def test_junit_has_a_suite_per_submission_and_a_case_per_check(both_ways):
    singles, batch, root, _ = both_ways
    report = json.loads(batch.stdout)
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [s["name"] for s in report["submissions"]]
    for suite, submission in zip(suites, report["submissions"]):
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == [c["name"] for c in submission["checks"]]
        assert {c.get("classname") for c in cases} == {submission["name"]}
        failing = [c for c in submission["checks"] if not c["passed"]]
        assert suite.get("tests") == str(len(cases))
        assert suite.get("failures") == str(len(failing))
        assert suite.get("errors") == suite.get("skipped") == "0"
        assert float(suite.get("time")) > 0
        for case, check in zip(cases, submission["checks"]):
            failure = case.find("failure")
            if check["passed"]:
                assert list(case) == []
            else:
                assert failure.get("message") == check["reason"]
                # The failure body: the reason, the hint, and the trial's story.
                assert failure.text == "\n".join([
                    check["reason"], f"Hint: {check['hint']}",
                    "What happened in the trial that failed:", *check["story"]])
                assert failure.text.splitlines()[-1].startswith("found  ")
    for key in ("tests", "failures", "errors", "skipped"):
        assert root.get(key) == str(sum(int(s.get(key)) for s in suites))


def expected_rates(submissions):
    """(check, passed, graded) for each check, counted from the batch's JSON."""
    names = [check["name"] for check in submissions[0]["checks"]]
    return [(name, sum(c["passed"] for s in submissions for c in s["checks"] if c["name"] == name),
             len(submissions)) for name in names]


@needs_chromium
@needs_axe
def test_the_class_report_shows_pass_rates_mistakes_and_stories(both_ways, browser):
    _, batch, _, reports = both_ways
    submissions = json.loads(batch.stdout)["submissions"]
    assert all(s["status"] == "graded" for s in submissions)
    context = browser.new_context(bypass_csp=True)  # axe-core is added to the page as a script
    page = context.new_page()
    asked = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto(reports["html"].as_uri())
    assert asked == [reports["html"].as_uri()]  # it fetches nothing
    expect(page.locator("h1")).to_have_text(f"Class report: {reports['html'].parent / 'class'}")
    passed = sum(s["passed"] for s in submissions)
    expect(page.locator("main > p").first).to_have_text(
        f"{passed} of {len(submissions)} submissions passed.")
    # Each check's pass rate: a bar with its numbers, and the same in the table.
    rates = expected_rates(submissions)
    chart = page.get_by_role("img", name="Pass rate per check")
    # SVG text has no innerText: its text content is what a screen reader reads.
    assert chart.locator("text:not(.label)").all_text_contents() == [
        f"{p} of {g} passed ({round(100 * p / g)} %)" for _, p, g in rates]
    table = page.locator("table", has=page.locator("caption", has_text="the chart as text"))
    assert [row.locator("th, td").all_inner_texts() for row in table.locator("tr").all()[1:]] == [
        [name, str(p), str(g), f"{round(100 * p / g)} %"] for name, p, g in rates]
    # The failures grouped by mistake (the check and its hint), the most common first.
    groups = {}
    for s in submissions:
        for c in s["checks"]:
            if not c["passed"]:
                groups.setdefault((c["name"], c["hint"]), []).append((s["name"], c))
    biggest = max(len(members) for members in groups.values())
    first = page.locator("h2:has-text('Where the class goes wrong') ~ section").first
    order = [check["name"] for check in submissions[0]["checks"]]
    _, _, name, members = min((order.index(name), i, name, members)
                              for i, ((name, _), members) in enumerate(groups.items())
                              if len(members) == biggest)
    expect(first.locator("h3")).to_have_text(f"{biggest} submissions failed {name}")
    example_name, example = members[0]
    assert first.locator("pre").inner_text() == "\n".join(example["story"])
    expect(first.locator("p", has_text="For example")).to_have_text(
        f"For example, {example_name}: {example['reason']}")
    # A row per submission, linking to its checks; the name is shown as text, not markup.
    rows = page.locator("table", has=page.locator("caption", has_text="Every submission"))
    assert rows.locator("tr th a").all_inner_texts() == [s["name"] for s in submissions]
    assert page.locator("i").count() == 0
    link = rows.get_by_role("link", name=MARKUP, exact=True)
    section = page.locator(link.get_attribute("href"))
    expect(section.locator("h3")).to_have_text(f"{MARKUP}: FAIL")
    assert section.locator("tr").count() == 1 + len(submissions[0]["checks"])
    # A story's long lines scroll in their own box: the page is no wider than the window.
    assert page.evaluate("document.documentElement.scrollWidth") <= page.viewport_size["width"]
    results = axe_results(page)
    assert [(v["id"], [n["target"] for n in v["nodes"]]) for v in results["violations"]] == []
    context.close()


def test_the_class_csv_has_a_row_per_submission_and_a_column_per_check(both_ways):
    _, batch, _, reports = both_ways
    submissions = json.loads(batch.stdout)["submissions"]
    names = [check["name"] for check in submissions[0]["checks"]]
    with open(reports["csv"], newline="", encoding="utf-8") as file:
        rows = list(csv.reader(file))
    assert rows[0] == ["submission", "status", "result", "checks passed", *names]
    assert rows[1:] == [
        ["'" + s["name"] if s["name"] == MARKUP else s["name"], "graded",
         "PASS" if s["passed"] else "FAIL", str(sum(c["passed"] for c in s["checks"])),
         *(str(int(c["passed"])) for c in s["checks"])] for s in submissions]


def test_single_run_writes_junit_and_gradescope(both_ways):
    singles, _, _, reports = both_ways
    _, single = singles["Ana López"]
    root = ET.parse(reports["junit"]).getroot()
    (suite,) = root.findall("testsuite")
    assert suite.get("name").endswith("Ana López/handler.py")
    names = [c.get("name") for c in suite.findall("testcase")]
    assert names == [c["name"] for c in single["checks"]]
    assert suite.get("failures") == str(sum(not c["passed"] for c in single["checks"]))

    results = json.loads(reports["gradescope"].read_text(encoding="utf-8"))
    assert set(results) == {"score", "execution_time", "tests"}
    assert results["score"] == sum(c["passed"] for c in single["checks"]) > 0
    assert [t["name"] for t in results["tests"]] == [c["name"] for c in single["checks"]]
    for test, check in zip(results["tests"], single["checks"]):
        assert (test["score"], test["max_score"]) == ((1, 1) if check["passed"] else (0, 1))
        assert test["status"] == ("passed" if check["passed"] else "failed")
        assert test["output_format"] == "md"
        if check["passed"]:
            assert test["output"] == check["reason"]
        else:  # Markdown: the story as an indented block
            assert test["output"] == "\n".join([
                check["reason"], "", f"Hint: {check['hint']}", "",
                "What happened in the trial that failed:", "",
                *(f"    {line}" for line in check["story"])])


# ---- submissions that misbehave, beside a good one ---------------------------------------

GOOD = HANDLERS["unit3"].read_text()
# Correct, but it prints 8 MB to the worker's stdout and stderr first.
FLOODS_ITS_WORKER = GOOD.replace("def handle(ch, delivery, job, db, pause):\n", """\
import sys

def handle(ch, delivery, job, db, pause):
    for _ in range(4000):
        print("x" * 1000)
        print("y" * 1000, file=sys.stderr)
""")
# Writes 4 MB straight into its grader's own stdout (the worker's parent).
FLOODS_ITS_GRADER = GOOD.replace("def handle(ch, delivery, job, db, pause):\n", """\
import os

def handle(ch, delivery, job, db, pause):
    with open(f"/proc/{os.getppid()}/fd/1", "w") as grader_stdout:
        grader_stdout.write("z" * 4_000_000)
""")
# Freezes its grader (SIGSTOP to the worker's parent): only the batch's time limit ends it.
HANGS_ITS_GRADER = GOOD.replace("def handle(ch, delivery, job, db, pause):\n", """\
import os, signal

def handle(ch, delivery, job, db, pause):
    os.kill(os.getppid(), signal.SIGSTOP)
""")
# Kills its grader outright.
KILLS_ITS_GRADER = HANGS_ITS_GRADER.replace("SIGSTOP", "SIGKILL")


def test_hanging_and_flooding_submissions_affect_no_other(tmp_path):
    """Without a sandbox (--trusted), the batch itself keeps each submission to its own row.
    (In a sandbox, these attacks cannot reach the grader at all: tests/test_sandbox.py.)"""
    folder = tmp_path / "class"
    # In name order, so the one that freezes starts first and the others run beside it.
    submissions = {"freezes its grader": HANGS_ITS_GRADER, "good": GOOD,
                   "kills its grader": KILLS_ITS_GRADER, "prints 8 MB": FLOODS_ITS_WORKER,
                   "writes into its grader's stdout": FLOODS_ITS_GRADER}
    for name, text in submissions.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "handler.py").write_text(text)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    # Its own private node this time; every temporary file goes under scratch.
    result = grader("--handlers", str(folder), "--jobs", "2", "--submission-timeout", "20",
                    "--trusted", env=dict(os.environ, TMPDIR=str(scratch)), timeout=180)
    lines = result.stdout.splitlines()
    # None of the three could be graded, twice: listed apart, neither passed nor failed.
    assert result.returncode == 2, result.stdout + result.stderr
    assert lines[0] == (f"Grading 5 submissions in {folder} (a private RabbitMQ node,"
                        " throwaway databases, not sandboxed; 2 at a time)")
    # Progress in the order the gradings finish: "N of 5  NAME: VERDICT (SECONDS s)".
    progress = lines[1:6]
    assert sorted(line.split("  ")[0] for line in progress) == [f"{n} of 5" for n in range(1, 6)]
    assert {line.split("  ", 1)[1].rsplit(" (", 1)[0] for line in progress} == {
        "freezes its grader: NOT GRADED: grading took longer than 20 s and was stopped"
        " (tried twice)",
        "good: PASS, 6/6 checks passed",
        "kills its grader: NOT GRADED: the grader was killed by signal 9 (tried twice)",
        "prints 8 MB: PASS, 6/6 checks passed",
        "writes into its grader's stdout: NOT GRADED: the grader's output passed 1048576 bytes"
        " and was cut off (tried twice)",
    }
    rows = [
        "Submission                       Result      Checks  First failing check or note",
        "freezes its grader               NOT GRADED  -       grading took longer than 20 s and"
        " was stopped (tried twice)",
        "good                             PASS        6/6",
        "kills its grader                 NOT GRADED  -       the grader was killed by signal 9"
        " (tried twice)",
        "prints 8 MB                      PASS        6/6",
        "writes into its grader's stdout  NOT GRADED  -       the grader's output passed 1048576"
        " bytes and was cut off (tried twice)",
    ]
    assert lines[6:] == ["", rows[0], "-" * max(map(len, rows)), *rows[1:], "",
                         "All 2 submissions passed; 3 not graded, so neither passed nor failed"
                         " (grade them again): freezes its grader, kills its grader, writes into"
                         " its grader's stdout."]
    # Nothing is left: no grader, worker or node process, no temporary file.
    assert processes_mentioning(str(tmp_path)) == []
    assert list(scratch.iterdir()) == []


def test_the_private_node_starts_again_when_another_program_takes_its_port():
    node = PrivateNode().start()
    taken = node.port
    # Bound before the node's Erlang VM has booted far enough to listen.
    with socket.socket() as other_program:
        other_program.bind(("127.0.0.1", taken))
        other_program.listen()
        try:
            node.wait_ready()
            assert node.port != taken
            pika.BlockingConnection(pika.URLParameters(node.url)).close()
        finally:
            node.stop()


# ---- bad input ------------------------------------------------------------------------------


def test_missing_or_empty_folder_is_one_line(tmp_path):
    missing = grader("--handlers", str(tmp_path / "nowhere"))
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == f"Cannot grade: no folder at {tmp_path / 'nowhere'}\n"
    empty = grader("--handlers", str(tmp_path), "--json")
    assert (empty.returncode, empty.stderr) == (2, "")
    assert json.loads(empty.stdout) == {
        "passed": False, "submissions": [],
        "error": f"{tmp_path} is empty: it should hold one folder per submission,"
                 " each with a handler.py"}


def test_skipped_and_refused_folders_are_listed_and_not_graded(tmp_path):
    outside = tmp_path / "outside"
    make_class(outside, {"elsewhere": HANDLERS["unit3"]})
    folder = tmp_path / "class"
    (folder / "no handler").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a submission")
    (folder / "link out").symlink_to(outside / "elsewhere")
    (folder / "handler link").mkdir()
    (folder / "handler link" / "handler.py").symlink_to(outside / "elsewhere" / "handler.py")
    result = grader("--handlers", str(folder), "--junit", str(tmp_path / "class.xml"))
    assert result.returncode == 2
    rows = [f"handler link  REFUSED  -       refused: handler.py links to a file outside {folder}",
            f"link out      REFUSED  -       refused: a link to a folder outside {folder}",
            "no handler    SKIPPED  -       no handler.py",
            "notes.txt     SKIPPED  -       not a folder"]
    assert result.stdout.splitlines() == [
        "", "Submission    Result   Checks  First failing check or note", "-" * len(rows[0]),
        *rows, "", "0 of 2 submissions passed; 2 skipped."]
    assert result.stderr == f"Cannot grade: no folder in {folder} holds a handler.py.\n"
    suites = ET.parse(tmp_path / "class.xml").getroot().findall("testsuite")
    assert [(s.get("name"), s.get("errors"), s.get("skipped")) for s in suites] == [
        ("handler link", "1", "0"), ("link out", "1", "0"),
        ("no handler", "0", "1"), ("notes.txt", "0", "1")]


def test_gradescope_is_for_one_submission(tmp_path):
    result = grader("--handlers", str(tmp_path), "--gradescope", str(tmp_path / "results.json"))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == ("python3 -m grader: error: --gradescope writes one"
                                              " submission's results; use --junit for a class")
