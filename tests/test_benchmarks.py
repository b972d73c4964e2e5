"""The benchmark scripts (make bench) still run against the code they measure, in a short form."""

import os
import re
import shutil
import subprocess
import sys

import pytest

from labkit import ROOT
from nightjar import sandbox

BENCHMARKS = ROOT / "benchmarks"


def bench(script, *args):
    result = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.splitlines()


def test_worker_bench_measures_start_up_and_drain():
    lines = bench("worker_bench.py", "--runs", "2", "--messages", "20", "--rounds", "1")
    assert len(lines) == 3, lines
    assert re.fullmatch(r"worker\.py start to exit, one message: median \d+\.\d{3} s"
                        r" \(min \d+\.\d{3}, max \d+\.\d{3}, 2 runs\)", lines[0])
    assert re.fullmatch(r"--drain 20 messages: worker \d+\.\d\d s \(\d+/s\), bare pika loop"
                        r" \d+\.\d\d s \(\d+/s\), ratio \d+\.\d\d \(bare time / worker time\)",
                        lines[1])
    assert re.fullmatch(r"delivery history on / off, alternating: start to exit median \d+\.\d{3} /"
                        r" \d+\.\d{3} s \([+-]\d+\.\d %; CPU [+-]\d+\.\d %\), --drain 20 median"
                        r" \d+\.\d\d / \d+\.\d\d s \([+-]\d+\.\d %; CPU \d+\.\d\d / \d+\.\d\d s,"
                        r" [+-]\d+\.\d %\)", lines[2]), lines[2]


def test_grader_bench_grades_the_unit3_solution_on_a_private_node():
    lines = bench("grader_bench.py", "--runs", "1")  # one run: no median line
    routes = ["sandboxed", "trusted"] if sandbox.unavailable_reason() is None else ["trusted"]
    assert len(lines) == len(routes), lines
    for line, route in zip(lines, routes):
        assert re.fullmatch(rf"run 1 {route}: +total +\d+\.\d\d s  broker_start +\d+\.\d\d s"
                            r"  sandbox +\d+\.\d\d s  checks +\d+\.\d\d s  broker_stop +\d+\.\d\d s"
                            r"  \(6/6 checks passed\)", line), line


def test_cpu_bench_splits_a_gradings_cpu_and_times_forked_and_fresh_worker_starts():
    if sandbox.unavailable_reason() is not None:
        pytest.skip(f"the sandbox cannot run here: {sandbox.unavailable_reason()}")
    lines = bench("cpu_bench.py", "--runs", "1", "--starts", "2")
    assert lines[0] == "route: sandboxed; a warm-up grading first", lines
    figures = (r"checks +\d+\.\d\d s  grader +\d+\.\d\d s  workers +\d+\.\d\d s"
               r"  broker +\d+\.\d\d s  total +\d+\.\d\d s")
    assert re.fullmatch(rf"run 1: {figures}  \(6/6 checks passed\)", lines[1]), lines
    assert re.fullmatch(rf"median: {figures}", lines[2]), lines
    for line, how in zip(lines[3:], ("forked", "fresh"), strict=True):
        assert re.fullmatch(rf"a worker run finding no message, {how}: median +\d+\.\d ms of CPU"
                            r" \(\d+\.\d-\d+\.\d ms, 2 runs\)", line), line


def test_farm_bench_presses_grades_as_a_course_does():
    if sandbox.unavailable_reason() is not None:
        pytest.skip(f"the farm's hosts grade in the sandbox: {sandbox.unavailable_reason()}")
    lines = bench("farm_bench.py", "--peak", "--grades", "2", "--within", "0.5")
    assert len(lines) == 3, lines
    assert re.fullmatch(r"one Grade alone: a per-Grade overhead of -?\d+\.\d\d s \(press to verdict,"
                        r" less the host's grading of it\)", lines[0]), lines[0]
    assert re.fullmatch(rf"peak: 2 Grades pressed within 0\.5 s, one grading host of"
                        rf" {len(os.sched_getaffinity(0))} slots \(\d+ cores\), load \d+\.\d: first verdict"
                        r" \d+\.\d s after the first press, median \d+\.\d s, last \d+\.\d s after the last"
                        r" press; 0 not graded, 0 verdicts other than the same handler's graded alone",
                        lines[1]), lines[1]
    assert re.fullmatch(r"peak CPU a Grade: \d+\.\d\d s on the grading host \(grader and workers"
                        r" \d+\.\d\d, its grading broker \d+\.\d\d\), \d+\.\d\d s the service's side,"
                        r" \d+\.\d\d s the farm broker", lines[2]), lines[2]


def test_sandbox_bench_times_each_set_up_step():
    if sandbox.unavailable_reason() is not None:
        pytest.skip(f"the sandbox cannot run here: {sandbox.unavailable_reason()}")
    lines = bench("sandbox_bench.py", "--rounds", "1", "--trials", "2")
    steps = ["sandbox start", "trial set-up", "worker start in a trial", "trial take-down",
             "sandbox close", "root built by root.py"]
    if shutil.which("bwrap"):
        steps.append("root built by bubblewrap")
    assert re.fullmatch(r"median of 1 round, 2 trials each \(load \d+\.\d\):", lines[0]), lines
    assert [line.split(":")[0].strip() for line in lines[1:]] == steps, lines
    for line in lines[1:]:
        assert re.fullmatch(r"  [a-z. -]+: +\d+\.\d ms", line), line


def test_story_bench_times_the_checks_with_and_without_stories():
    lines = bench("story_bench.py", "--runs", "1")
    assert lines[0] in ("Checks of one handler, median of 1 runs (sandboxed):",
                        "Checks of one handler, median of 1 runs (not sandboxed):"), lines
    for line, name in zip(lines[1:], ("unit 2 (2 stories)", "unit 3 (none)")):
        assert re.fullmatch(rf"  {re.escape(name)} +with stories \d+\.\d\d s, without \d+\.\d\d s:"
                            r" [+-]\d+\.\d %", line), line
    assert len(lines) == 3


def test_report_bench_writes_a_class_report_and_csv(tmp_path):
    shutil.copyfile(ROOT / "tests" / "handlers" / "never_acks.py", tmp_path / "never_acks.py")
    shutil.copyfile(ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py",
                    tmp_path / "solution.py")
    lines = bench("report_bench.py", "--submissions", "10", "--runs", "1",
                  "--handlers", str(tmp_path))
    assert re.fullmatch(r"2 real submissions graded in \d+\.\d s, repeated to 10 \(30 failed"
                        r" checks, each with its story\):", lines[0]), lines[0]
    assert re.fullmatch(r"  --report: \d+ KiB, written in \d+\.\d ms \(median of 1\)", lines[1])
    assert re.fullmatch(r"  --csv: \d+ KiB, written in \d+\.\d ms \(median of 1\)", lines[2])


def test_summary_sets_a_figure_beside_its_budget_and_another_commits():
    lines = bench("summary.py", "--only", "worker_bench.py", "--against", "HEAD")
    assert lines[:2] == ["round 1: worker_bench.py on this checkout", "round 1: worker_bench.py on HEAD"]
    assert lines[2] == ""
    assert re.fullmatch(r"figure +budget +here +HEAD", lines[3]), lines[3]
    assert set(lines[4]) == {"-"}
    assert re.fullmatch(r"worker\.py start to exit  ≤ 0\.5 s  +\d\.\d+ +\d\.\d+ +within", lines[5]), lines[5]
    assert len(lines) == 6
    # The temporary worktree is gone again.
    worktrees = subprocess.run(["git", "-C", str(ROOT), "worktree", "list"], capture_output=True,
                               text=True).stdout
    assert "nightjar-bench-against-" not in worktrees


def test_reading_bench_times_a_read_from_a_checked_copy_and_directly():
    lines = bench("reading_bench.py", "--reads", "20", "--skip-grading")
    assert len(lines) == 1, lines
    assert re.fullmatch(r"one read of a lab's tickets, median of 20: from a checked copy"
                        r" \d+\.\d{3} ms, directly \d+\.\d{3} ms \([+-]\d+\.\d{3} ms\)", lines[0])


@pytest.mark.skipif(os.geteuid() != 0, reason="a starved CPU (a cpuset) needs root")
def test_node_boot_bench_boots_nodes_on_a_starved_cpu():
    lines = bench("node_boot_bench.py", "--boots", "2", "--parallel", "2", "--hogs", "1")
    assert len(lines) == 1, lines
    assert re.fullmatch(r"2 boots, 2 at a time, 1 hogs on one CPU, \d+ s: 0 failed, 0 needed a"
                        r" second try; boot median \d+\.\d s, max \d+\.\d s", lines[0]), lines[0]


def test_class_bench_measures_a_live_class():
    lines = bench("class_bench.py", "--labs", "10", "--seconds", "3", "--warmup", "1")
    assert re.fullmatch(r"10 labs, 1 event a second each, 3 s measured \(\d+ events seen on the staff's stream,"
                        r" 0 posts refused\)", lines[0]), lines
    assert re.fullmatch(r"event to the instructor's page: p50 \d+\.\d{3} s, p95 \d+\.\d{3} s", lines[1]), lines
    assert re.fullmatch(r"the service: \d+\.\d % of one core, \d+ MiB at most; \d+\.\d\d ms of CPU an event"
                        r" \(\d+ events/s taken; 15 % of a core at 300/s is 0\.50 ms\)", lines[2]), lines
    assert re.fullmatch(r"the class page with 10 rows drawn in Chromium: median \d+ ms \([\d, ]+\)", lines[3]), lines
