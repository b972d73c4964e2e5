"""The Nightjar grader: handler.py against a second broker and throwaway databases.

`python3 -m grader --help` for the options (options.py). cli.py chooses the
route and hands over to one of its entry points:

    one_handler.py      one handler.py
    batch.py            a class (--handlers DIR)
    farm_collector.py   a class on a grading farm (--handlers DIR --farm URL; farm.py the protocol)
    farm_host.py        a grading host of the farm (serve --farm URL)
    in_docker.py        the Docker route (--sandbox docker)

Below them: runner.py runs checks.py's checks (steps.py, findings.py;
story.py tells a failed trial's story), live.py reads the live results,
reports.py renders the verdicts, class_report.py a class's HTML page and
CSV, and report_files.py writes the files asked for. The
throwaway labs and interruptions are the harness (nightjar/harness/); where
handler.py runs is the sandbox (nightjar/sandbox/).
"""
