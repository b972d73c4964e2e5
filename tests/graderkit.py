"""What the grader tests share: the wrong handlers' folder, grading a handler through
`python -m grader --json`, and reading its report's numbered checks."""

import json
import subprocess
import sys

from labkit import ROOT

WRONG = ROOT / "tests" / "handlers"


def grade(handler, *options, broker=None, env=None, timeout=120):
    """(exit status, JSON report) of `python -m grader --handler HANDLER --json` on `broker`
    (conftest's GradingBroker), or on a private node of its own."""
    command = [sys.executable, "-m", "grader", "--handler", str(handler), "--json", *options]
    if broker:
        command += broker.args
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                            env=env)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def by_number(report):
    return {int(check["name"].split(".")[0]): check
            for check in report["checks"] if check["name"][:1].isdigit()}


def verdicts(checks):
    """What two gradings of one handler must agree on: each check's verdict, reason and hint,
    and the evidence its story found. (Its worker-side detail may differ: where a handler
    that prints its own pause line is when Ctrl+C comes is a race, told as it happened.)"""
    return [({key: check[key] for key in ("name", "passed", "reason", "hint")}, check.get("found"))
            for check in checks]
