"""The Nightjar grader: handler.py against a second broker and throwaway databases.

`python3 -m grader --help` for the options (options.py). cli.py chooses the
route and hands over to the entry point of one of its parts:

    handler/      one handler.py: grading.py the entry; runner.py, checks.py,
                  steps.py, findings.py, trial_story.py (a failed trial's story),
                  live.py (the live results)
    class_run/    a class (--handlers DIR) on one broker: batch.py
    farm/         the grading farm: its protocol (farm/__init__.py), a grading
                  host (host.py, serve --farm URL) and the collector
                  (collector.py, --handlers DIR --farm URL)
    reports/      the verdicts as text, JSON, JUnit and Gradescope's
                  results.json (reports/__init__.py), a class's HTML page and
                  CSV (class_report.py), the files asked for (files.py)
    in_docker.py  the Docker route (--sandbox docker)
    service.py    the grader on request (python3 -m grader.service)

The throwaway labs and interruptions are the harness (nightjar/harness/);
where handler.py runs is the sandbox (nightjar/sandbox/).
"""
