"""A class's verdicts for its instructor: one self-contained HTML page (--report) and a CSV (--csv).

The page fetches nothing (no script, style sheet, font or image of its own):
each check's pass rate as a bar chart in inline SVG, with the numbers as
text beside each bar and again in a table; the failures grouped by the
mistake behind them (the check and its hint), with one example story each;
then a row per submission linking to its checks and stories. Every text from
a submission or a worker is escaped.

The CSV has one row per submission: its name, status, result, checks passed,
then one column per check (1 passed, 0 failed, empty when not graded).
"""

import csv
import html
import io

from . import ERROR, GRADED, SKIPPED, shown, summary_line

BAR_WIDTH = 360   # px of a 100 % bar
ROW_HEIGHT = 46   # px per check in the chart: its name above its bar


def check_names(submissions):
    """Every check's name, in the order the graded submissions have them."""
    names = []
    for s in submissions:
        for check in s.checks:
            if check["name"] not in names:
                names.append(check["name"])
    return names


def pass_rates(submissions):
    """[(check name, passed, graded)] over the graded submissions."""
    graded = [s for s in submissions if s.status == GRADED]
    rates = []
    for name in check_names(submissions):
        verdicts = [c["passed"] for s in graded for c in s.checks if c["name"] == name]
        rates.append((name, sum(verdicts), len(verdicts)))
    return rates


def mistakes(submissions):
    """[(check name, hint, [(index, submission, check)])]: submissions failing a check with the
    same hint fail it the same way; the most common first."""
    groups = {}
    for index, s in enumerate(submissions):
        for check in s.checks:
            if not check["passed"]:
                groups.setdefault((check["name"], check["hint"]), []).append((index, s, check))
    order = check_names(submissions)
    return sorted(((name, hint, members) for (name, hint), members in groups.items()),
                  key=lambda group: (-len(group[2]), order.index(group[0])))


# ---- HTML ----------------------------------------------------------------------------


def _e(text):
    return html.escape(shown(str(text)), quote=True)


def _percent(passed, graded):
    return f"{round(100 * passed / graded)} %" if graded else "no graded submission"


def _chart(rates):
    height = ROW_HEIGHT * len(rates) + 8
    rows = []
    for i, (name, passed, graded) in enumerate(rates):
        y = ROW_HEIGHT * i + 4
        width = round(BAR_WIDTH * passed / graded) if graded else 0
        rows.append(
            f'<text x="0" y="{y + 14}" class="label">{_e(name)}</text>'
            f'<rect x="0" y="{y + 20}" width="{BAR_WIDTH}" height="18" class="track"/>'
            f'<rect x="0" y="{y + 20}" width="{width}" height="18" class="bar"/>'
            f'<text x="{BAR_WIDTH + 8}" y="{y + 34}">{passed} of {graded} passed'
            f' ({_percent(passed, graded)})</text>')
    return (f'<svg role="img" aria-labelledby="chart-title chart-desc" width="100%"'
            f' viewBox="0 0 {BAR_WIDTH + 320} {height}" preserveAspectRatio="xMinYMin meet">'
            '<title id="chart-title">Pass rate per check</title>'
            '<desc id="chart-desc">One bar per check, as long as the share of graded submissions'
            ' that passed it; the same numbers are in the table below.</desc>'
            + "".join(rows) + "</svg>")


def _rates_table(rates):
    rows = "".join(f'<tr><th scope="row">{_e(name)}</th><td>{passed}</td><td>{graded}</td>'
                   f"<td>{_percent(passed, graded)}</td></tr>" for name, passed, graded in rates)
    return ('<table><caption>Pass rate per check (the chart as text)</caption>'
            '<tr><th scope="col">Check</th><th scope="col">Passed</th>'
            '<th scope="col">Graded</th><th scope="col">Pass rate</th></tr>' + rows + "</table>")


def _story(check):
    told = check.get("story") or []
    if not told:
        return ""
    return ("<p>What happened in the trial that failed:</p>"
            f'<pre tabindex="0">{_e_lines(told)}</pre>')


def _e_lines(lines):
    return "\n".join(_e(line) for line in lines)


def _link(index, s):
    return f'<a href="#s-{index}">{_e(s.name)}</a>'


def _mistakes(groups):
    if not groups:
        return "<p>No graded submission failed a check.</p>"
    parts = []
    for name, hint, members in groups:
        _, example, check = members[0]
        count = f"{len(members)} submission{'s' if len(members) != 1 else ''}"
        parts.append(
            f"<section><h3>{count} failed {_e(name)}</h3>"
            + (f"<p>Hint: {_e(hint)}</p>" if hint else "")
            + "<p>Submissions: " + ", ".join(_link(i, s) for i, s, _ in members) + "</p>"
            + f"<p>For example, {_e(example.name)}: {_e(check['reason'])}</p>"
            + _story(check) + "</section>")
    return "".join(parts)


def _submissions_table(submissions):
    rows = "".join(
        f'<tr><th scope="row">{_link(i, s)}</th><td>{_e(s.result)}</td>'
        f'<td>{_e(s.checks_passed())}</td><td class="seen">{_e(s.first_problem())}</td></tr>'
        for i, s in enumerate(submissions))
    return ('<table><caption>Every submission</caption><tr><th scope="col">Submission</th>'
            '<th scope="col">Result</th><th scope="col">Checks</th>'
            '<th scope="col">First failing check or note</th></tr>' + rows + "</table>")


def _submission(index, s):
    head = f'<section id="s-{index}"><h3>{_e(s.name)}: {_e(s.result)}</h3>'
    if not s.checks:
        return head + f"<p>{_e(s.note)}</p></section>"
    rows = []
    for check in s.checks:
        verdict = "PASS" if check["passed"] else "FAIL"
        detail = f"<p>{_e(check['reason'])}</p>"
        if not check["passed"]:
            detail += (f"<p>Hint: {_e(check['hint'])}</p>" if check["hint"] else "") + _story(check)
        rows.append(f'<tr><th scope="row">{_e(check["name"])}</th><td>{verdict}</td>'
                    f'<td class="seen">{detail}</td></tr>')
    return (head + f"<table><caption>The checks of {_e(s.name)}</caption>"
            '<tr><th scope="col">Check</th><th scope="col">Verdict</th>'
            '<th scope="col">What the grader saw</th></tr>' + "".join(rows) + "</table></section>")


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 72rem; padding: 0 1rem;
       color: #111; background: #fff; line-height: 1.4; overflow-wrap: break-word; }
table { border-collapse: collapse; margin: 1rem 0; width: 100%; }
caption { text-align: left; font-weight: bold; padding: 0.3rem 0; }
th, td { border: 1px solid #999; padding: 0.3rem 0.5rem; text-align: left; vertical-align: top; }
/* What a handler printed may be wider than a screen (a story's lines, a long word): the cell
   takes the width that is left, and a story scrolls in its own box instead of widening the page. */
td.seen { width: 60%; max-width: 0; overflow-wrap: anywhere; }
pre { background: #f4f4f4; border: 1px solid #999; padding: 0.5rem; overflow-x: auto; }
svg { max-width: 48rem; display: block; }
svg text { font-size: 13px; fill: #111; }
svg .label { font-weight: bold; }
svg .track { fill: #fff; stroke: #555; }
svg .bar { fill: #1f4e8c; }
a { color: #0645ad; }
"""


def html_report(submissions, title):
    """The class report's HTML text."""
    graded = [s for s in submissions if s.status == GRADED]
    not_graded = [(i, s) for i, s in enumerate(submissions) if s.status == ERROR]
    rates = pass_rates(submissions)
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Class report: {_e(title)}</title><style>{STYLE}</style></head><body><main>",
        f"<h1>Class report: {_e(title)}</h1>",
        f"<p>{_e(summary_line(submissions))}</p>",
        "<h2>Pass rate per check</h2>",
        (_chart(rates) + _rates_table(rates)) if graded else "<p>No submission was graded.</p>",
    ]
    if not_graded:
        parts += ["<h2>Not graded</h2><p>Neither passed nor failed: grade them again.</p><ul>",
                  *(f"<li>{_link(i, s)}: {_e(s.note)}</li>" for i, s in not_graded), "</ul>"]
    parts += ["<h2>Where the class goes wrong</h2>", _mistakes(mistakes(submissions)),
              "<h2>Submissions</h2>", _submissions_table(submissions),
              *(_submission(i, s) for i, s in enumerate(submissions) if s.status != SKIPPED),
              "</main></body></html>\n"]
    return "".join(parts)


# ---- CSV -----------------------------------------------------------------------------


def _cell(text):
    # A spreadsheet runs a cell starting with = + - @ as a formula: a name must stay text.
    text = shown(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def csv_text(submissions):
    """One row per submission: name, status, result, checks passed, then one column per check."""
    names = check_names(submissions)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["submission", "status", "result", "checks passed", *map(_cell, names)])
    for s in submissions:
        verdicts = {c["name"]: c["passed"] for c in s.checks}
        graded = s.status == GRADED
        writer.writerow([_cell(s.name), s.status, s.result,
                         sum(verdicts.values()) if graded else "",
                         *((int(verdicts[n]) if graded and n in verdicts else "") for n in names)])
    return out.getvalue()
