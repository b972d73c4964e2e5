"""What a grading run reports: the summary table, JSON, JUnit XML and Gradescope's results.json.

A single run and a class (batch) run both report a list of Submission: one
folder's verdict with its checks as the grader's JSON gives them ({name,
passed, reason, hint}, and a failed check's story). files.py writes
the files a run asks for; class_report.py renders --report and --csv.
"""

import json
import re
import sys
import unicodedata
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

# status: graded (its checks say whether it passed), skipped (no handler.py:
# not a submission), refused (not graded on purpose), error (not graded: the
# grader could not, so it is neither a pass nor the learner's fail).
GRADED, SKIPPED, REFUSED, ERROR = "graded", "skipped", "refused", "error"


@dataclass
class Submission:
    name: str
    status: str
    checks: list = field(default_factory=list)
    note: str = ""
    seconds: float = 0.0
    host: str = ""  # the farm host that graded it (grader/farm/); empty when graded here

    @property
    def passed(self):
        return self.status == GRADED and bool(self.checks) and all(c["passed"] for c in self.checks)

    @property
    def result(self):
        if self.status == GRADED:
            return "PASS" if self.passed else "FAIL"
        return "NOT GRADED" if self.status == ERROR else self.status.upper()

    def checks_passed(self):
        return f"{sum(c['passed'] for c in self.checks)}/{len(self.checks)}" if self.checks else "-"

    def first_problem(self):
        """The note, or the first failing check's name: what the table shows."""
        failing = [c["name"] for c in self.checks if not c["passed"]]
        return self.note or (failing[0] if failing else "")

    def as_dict(self):
        out = {"name": self.name, "passed": self.passed, "status": self.status,
               "checks": self.checks}
        if self.note:
            out["note"] = self.note
        if self.host:
            out["host"] = self.host
        return out


def exit_status(submissions):
    """0 when every submission passed, 1 when one failed, else 2: none, or not all, could be graded."""
    if not any(s.status == GRADED for s in submissions):
        return 2
    if any(not s.passed for s in submissions if s.status not in (SKIPPED, ERROR)):
        return 1
    return 2 if any(s.status == ERROR for s in submissions) else 0


# ---- text ------------------------------------------------------------------------


def shown(text):
    """A name safe to print on one line: control characters become \\xNN."""
    return "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)


def _width(text):
    # Wide (e.g. CJK) letters take two columns in a terminal.
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text, width):
    return text + " " * (width - _width(text))


def progress_line(done, total, submission):
    what = (f"{submission.result}, {submission.checks_passed()} checks passed"
            if submission.status == GRADED else f"{submission.result}: {submission.note}")
    return f"{done} of {total}  {shown(submission.name)}: {what} ({submission.seconds:.1f} s)"


def table(submissions):
    rows = [("Submission", "Result", "Checks", "First failing check or note")]
    rows += [(shown(s.name), s.result, s.checks_passed(), s.first_problem()) for s in submissions]
    widths = [max(_width(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(_pad(cell, w) for cell, w in zip(row, widths)) + "  " + row[3]
             for row in rows]
    lines = [line.rstrip() for line in lines]
    lines.insert(1, "-" * max(_width(line) for line in lines))
    return "\n".join(lines)


def summary_line(submissions):
    """How many of the graded submissions passed; the not graded are named apart, never counted."""
    counted = [s for s in submissions if s.status not in (SKIPPED, ERROR)]
    not_graded = [shown(s.name) for s in submissions if s.status == ERROR]
    skipped = sum(s.status == SKIPPED for s in submissions)
    passed = sum(s.passed for s in counted)
    if not counted and not_graded:
        line = "No submission was graded"
    elif counted and passed == len(counted):
        line = f"All {passed} submissions passed"
    else:
        line = f"{passed} of {len(counted)} submissions passed"
    if skipped:
        line += f"; {skipped} skipped"
    if not_graded:
        line += (f"; {len(not_graded)} not graded, so neither passed nor failed (grade them"
                 f" again): {', '.join(not_graded)}")
    return line + "."


def batch_json(submissions, **extra):
    return json.dumps({"passed": exit_status(submissions) == 0,
                       "submissions": [s.as_dict() for s in submissions], **extra},
                      ensure_ascii=False)


# ---- JUnit XML -----------------------------------------------------------------------

# Characters XML 1.0 cannot hold at all (a learner's exception text may have them).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml_text(text):
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


STORY_TITLE = "What happened in the trial that failed:"


def _explained(check, markdown=False):
    """A check's reason, and its hint and story when it failed: the text JUnit shows, or as
    Markdown for Gradescope, the story an indented block that no text in it can end (every
    line is printable and starts with the indent)."""
    hint = check["hint"] if not check["passed"] else ""
    told = check.get("story", [])
    gap, indent = ("\n\n", "    ") if markdown else ("\n", "")
    text = check["reason"] + (f"{gap}Hint: {hint}" if hint else "")
    if told:
        text += f"{gap}{STORY_TITLE}{gap}" + "\n".join(f"{indent}{line}" for line in told)
    return text


def junit(submissions, suite_name="nightjar-grader"):
    """The JUnit XML text: one testsuite per submission, one testcase per check."""
    root = ET.Element("testsuites", name=suite_name)
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for s in submissions:
        name = _xml_text(s.name)
        suite = ET.SubElement(root, "testsuite", name=name)
        counts = dict.fromkeys(totals, 0)
        for check in s.checks:
            case = ET.SubElement(suite, "testcase", classname=name, name=_xml_text(check["name"]))
            counts["tests"] += 1
            if not check["passed"]:
                counts["failures"] += 1
                reason = _xml_text(check["reason"])
                ET.SubElement(case, "failure", message=reason,
                              type="check failed").text = _xml_text(_explained(check))
        if s.status != GRADED:
            # No checks ran: one testcase says why, so the submission is not silently absent.
            case = ET.SubElement(suite, "testcase", classname=name, name="grading")
            counts["tests"] += 1
            counts["skipped" if s.status == SKIPPED else "errors"] += 1
            note = _xml_text(s.note)
            kind = {SKIPPED: "skipped", ERROR: "not graded"}.get(s.status, s.status)
            ET.SubElement(case, "skipped" if s.status == SKIPPED else "error", message=note,
                          type=kind).text = note
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{s.seconds:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{sum(s.seconds for s in submissions):.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ---- Gradescope ------------------------------------------------------------------------


def gradescope(submission):
    """Gradescope's results.json for one submission: a point per check, the total as score."""
    tests = [{"name": c["name"], "score": int(c["passed"]), "max_score": 1,
              "status": "passed" if c["passed"] else "failed", "output": _explained(c, markdown=True),
              "output_format": "md"}
             for c in submission.checks]
    results = {"score": sum(t["score"] for t in tests),
               "execution_time": round(submission.seconds, 1), "tests": tests}
    if submission.note:
        # Not graded: the score 0 is no verdict; the output says so, to grade it again.
        results["output"] = f"Not graded: {submission.note}"
    return json.dumps(results, ensure_ascii=False, indent=2) + "\n"



def single(name, results, error, seconds):
    """One handler's grading run as a Submission (results: the grader's Result objects)."""
    if error:
        return Submission(name, ERROR, note=error, seconds=seconds)
    return Submission(name, GRADED, [r.as_dict() for r in results], seconds=seconds)


# On a terminal (not when piped): PASS green, FAIL bold red, a story dimmed under it.
STYLES = {"PASS": "\x1b[32m", "FAIL": "\x1b[1;31m", "story": "\x1b[2m"}
PLAIN = "\x1b[0m"


def handler_text(results, handler, url_note, colour=False):
    """One handler's checks as the grader prints them: PASS or FAIL, the reason, the hint, and
    a failed check's story. colour: style them for a terminal."""
    def styled(text, style):
        return f"{STYLES[style]}{text}{PLAIN}" if colour else text

    lines = [f"Grading {handler}", f"({url_note})", ""]
    for result in results:
        verdict = "PASS" if result.passed else "FAIL"
        lines.append(f"{styled(verdict, verdict)}  {result.name}")
        lines.append(f"      {result.reason}")
        if not result.passed and result.hint:
            lines.append(f"      Hint: {result.hint}")
        told = result.story["story"] if result.story else []
        if told:
            lines += [f"      {STORY_TITLE}", *(styled(f"        {line}", "story") for line in told)]
    passed = sum(r.passed for r in results)
    lines.append("")
    lines.append(f"{passed} of {len(results)} checks passed." if passed < len(results)
                 else f"All {len(results)} checks passed.")
    return "\n".join(lines)


def cannot_grade(options, error):
    """Say in one line why nothing could be graded; exit status 2."""
    if options.json:
        key = "submissions" if options.handlers is not None else "checks"
        print(json.dumps({"passed": False, "error": error, key: []}, ensure_ascii=False))
    else:
        print(f"Cannot grade: {error}", file=sys.stderr)
    return 2
