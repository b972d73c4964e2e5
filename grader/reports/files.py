"""Writing the report files a grading run asks for: --junit, --gradescope, --report and --csv."""

from grader import reports

from . import class_report


def save(options, submissions):
    """Write the --junit, --gradescope, --report and --csv files the options ask for; a
    one-line error or None."""
    files = [(getattr(options, "junit", None), reports.junit),
             (getattr(options, "gradescope", None), lambda subs: reports.gradescope(subs[0])),
             (getattr(options, "report", None),
              lambda subs: class_report.html_report(subs, str(options.handlers))),
             (getattr(options, "csv", None), class_report.csv_text)]
    for path, render in files:
        if path:
            try:
                with open(path, "w", encoding="utf-8") as out:
                    out.write(render(submissions))
            except OSError as error:
                return f"Cannot write {path}: {error.strerror}"
    return None
