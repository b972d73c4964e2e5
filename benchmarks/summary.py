#!/usr/bin/env python3
"""Every figure people wait for, beside its budget and the same figure of another commit.

    .venv/bin/python benchmarks/summary.py [--against REV] [--rounds N] [--stack] [--only SCRIPT]
    (make bench; make bench AGAINST=REV STACK=1)

Runs the benchmarks of this folder on this checkout and on REV (default
HEAD: name the last commit that landed to see what a change does),
alternately, round after round, so that a busier moment of the machine
hurts both alike; then prints one table: each figure, its budget, the
median here and the median on REV. REV is checked out in a temporary git
worktree with this checkout's benchmarks/ copied in, so both sides are
measured by the same code. --stack adds the container lab's figures
(benchmarks/stack_bench.py under both Composes; needs a Docker engine).
--only SCRIPT (e.g. site_bench.py) measures that benchmark's figures alone.
A figure a side could not give shows as "-", with the reason below.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Figure:
    name: str
    unit: str
    budget: float
    higher_is_better: bool
    pattern: str  # finds the figure (group 1) in its benchmark's output

    def within(self, value):
        return value >= self.budget if self.higher_is_better else value <= self.budget

    def budget_text(self):
        return f"{'≥' if self.higher_is_better else '≤'} {self.budget:g} {self.unit}"


def stack_figures(compose):
    block = rf"(?ms)^{re.escape(compose)} \(Compose.*?"
    return [
        Figure(f"make up warm ({compose})", "s", 10, False, block + r"make up warm, median +([\d.]+) s"),
        Figure(f"make down ({compose})", "s", 3, False, block + r"make down, median +([\d.]+) s"),
        Figure(f"make grade warm ({compose})", "s", 4, False,
               block + r"make grade warm, median +([\d.]+) s"),
    ]


# (the benchmark's command, its figures)
BENCHMARKS = [
    (["worker_bench.py", "--runs", "11", "--messages", "300", "--rounds", "1"], [
        Figure("worker.py start to exit", "s", 0.5, False,
               r"worker\.py start to exit, one message: median ([\d.]+) s"),
    ]),
    (["grader_bench.py", "--runs", "3"], [
        Figure("one handler's checks", "s", 1.5, False,
               r"median (?:sandboxed|trusted): +total +[\d.]+ s .*checks +([\d.]+) s"),
    ]),
    (["cpu_bench.py", "--runs", "3"], [
        Figure("CPU a grading (grader+workers+broker)", "s", 2.0, False,
               r"median: .*total +([\d.]+) s"),
        Figure("checks on a warm node", "s", 1.0, False, r"median: checks +([\d.]+) s"),
    ]),
    (["grader_bench.py", "--kept-node", "--runs", "3"], [
        Figure("make grade warm (local)", "s", 1.5, False, r"median: +([\d.]+) s"),
    ]),
    (["batch_bench.py", "--runs", "1", "--routes", "sandboxed"], [
        Figure("a class", "submissions/min", 40, True,
               r"sandboxed: +[\d.]+ s +([\d.]+) submissions/min"),
    ]),
    # The end of a unit: 30 Grades pressed within 10 s, one grading host of 2 cores.
    (["farm_bench.py", "--peak"], [
        Figure("30 Grades in 10 s: first verdict after the first press", "s", 5, False,
               r"first verdict ([\d.]+) s after the first press"),
        Figure("30 Grades in 10 s: median verdict after the first press", "s", 25, False,
               r"median ([\d.]+) s, last"),
        Figure("30 Grades in 10 s: last verdict after the last press", "s", 40, False,
               r"last ([\d.]+) s\s+after the last press"),
        Figure("a Grade's overhead (press to verdict, less its grading)", "s", 0.2, False,
               r"a per-Grade overhead of (-?[\d.]+) s"),
        Figure("CPU a Grade on the grading host", "s", 2.0, False,
               r"peak CPU a Grade: ([\d.]+) s on the grading host"),
        Figure("CPU a Grade on the service's side", "s", 0.05, False, r"([\d.]+) s the service's side"),
    ]),
    # A live class: 300 labs' events, one a second each, into the course's service.
    (["class_bench.py", "--labs", "300"], [
        Figure("event to the instructor's page, p95 (300 labs)", "s", 1, False,
               r"event to the instructor's page: p50 [\d.]+ s, p95 ([\d.]+) s"),
        Figure("the course's service under 300 labs: CPU", "% of a core", 15, False,
               r"the service: ([\d.]+) % of one core"),
        Figure("the course's service under 300 labs: memory", "MiB", 200, False,
               r"the service: [\d.]+ % of one core, ([\d.]+) MiB at most"),
        Figure("the class page with 300 rows drawn (Chromium)", "ms", 500, False,
               r"rows drawn in Chromium: median ([\d.]+) ms"),
    ]),
    (["site_bench.py"], [
        Figure("registration POST, median", "ms", 10, False,
               r"Registration POST .*: median ([\d.]+) ms"),
        Figure("registration page under load", "requests/s", 1000, True,
               r"Registration page under load .*: ([\d.]+) requests/s"),
        Figure("make local to the site answering", "s", 1, False,
               r"make local to the site answering: median ([\d.]+) s"),
    ]),
]
STACK = (["stack_bench.py", "--compose", "both", "--warm-only", "--rounds", "3", "--grades", "3"],
         [*stack_figures("docker compose"), *stack_figures("docker-compose")])


def worktree(revision, folder):
    """REV checked out in `folder`, with this checkout's benchmarks/ in place of its own."""
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--force", str(folder),
                    revision], check=True, capture_output=True, text=True)
    shutil.rmtree(folder / "benchmarks")
    shutil.copytree(ROOT / "benchmarks", folder / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__"))


def measure(checkout, command, figures):
    """{figure name: value or the reason there is none} from one run of a benchmark."""
    # The lab is installed in the virtual environment as this checkout (editable):
    # another checkout's packages come first on the path.
    path = [str(checkout), str(checkout / "nightjar-site"), str(checkout / "lab-console")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    result = subprocess.run([sys.executable, str(checkout / "benchmarks" / command[0]), *command[1:]],
                            cwd=checkout, env=env, capture_output=True, text=True)
    found = {}
    for figure in figures:
        match = re.search(figure.pattern, result.stdout)
        if match:
            found[figure.name] = float(match.group(1))
        else:
            said = (result.stderr.strip().splitlines() or result.stdout.strip().splitlines() or [""])[-1]
            found[figure.name] = f"{command[0]} gave no figure (status {result.returncode}: {said[:160]})"
    return found


def table(figures, here, there, revision):
    rows = [("figure", "budget", "here", revision[:12], "")]
    notes = []
    for figure in figures:
        cells = []
        for side in (here, there):
            values = [v for v in side.get(figure.name, []) if isinstance(v, float)]
            why = [v for v in side.get(figure.name, []) if isinstance(v, str)]
            cells.append(f"{statistics.median(values):g}" if values else "-")
            notes += why[:1]
        values = [v for v in here.get(figure.name, []) if isinstance(v, float)]
        verdict = "" if not values else ("within" if figure.within(statistics.median(values))
                                         else "OVER BUDGET")
        rows.append((figure.name, figure.budget_text(), *cells, verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines + [f"- {note}" for note in dict.fromkeys(notes)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD", metavar="REV",
                        help="the commit to compare with (default HEAD)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of both sides (default 1)")
    parser.add_argument("--stack", action="store_true", help="the container lab's figures too")
    parser.add_argument("--only", metavar="SCRIPT", help="one benchmark's figures (e.g. site_bench.py)")
    options = parser.parse_args()
    if options.rounds < 1:
        parser.error("--rounds needs a number of 1 or more")
    revision = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                               f"{options.against}^{{commit}}"], capture_output=True, text=True)
    if revision.returncode != 0:
        parser.error(f"no commit {options.against!r} in this repository")
    benchmarks = BENCHMARKS + ([STACK] if options.stack or options.only == STACK[0][0] else [])
    if options.only:
        benchmarks = [(command, group) for command, group in benchmarks if command[0] == options.only]
        if not benchmarks:
            parser.error(f"--only takes one of {', '.join(dict.fromkeys(c[0] for c, _ in BENCHMARKS + [STACK]))}")
    figures = [figure for _, group in benchmarks for figure in group]
    here, there = {}, {}
    folder = Path(tempfile.mkdtemp(prefix="nightjar-bench-against-")) / "checkout"
    try:
        worktree(revision.stdout.strip(), folder)
        for round_number in range(1, options.rounds + 1):
            for command, group in benchmarks:
                for side, checkout in ((here, ROOT), (there, folder)):
                    print(f"round {round_number}: {command[0]} on"
                          f" {'this checkout' if checkout == ROOT else options.against}", flush=True)
                    for name, value in measure(checkout, command, group).items():
                        side.setdefault(name, []).append(value)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder)],
                       capture_output=True)
        shutil.rmtree(folder.parent, ignore_errors=True)
    print()
    print(table(figures, here, there, options.against))


if __name__ == "__main__":
    main()
