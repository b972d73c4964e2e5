#!/usr/bin/env python3
"""What the grader's reads of a lab's tables cost: from a checked copy without indexes, and directly.

    .venv/bin/python benchmarks/reading_bench.py [--reads N] [--skip-grading]

The grader reads a lab's tickets and completion keys from a copy of its
database, checked, with every index dropped and the tables' own keys rebuilt
(nightjar/harness/reading.py), so that no index of the handler's can change
or break a read. On a lab database as a check leaves it (seven registrations
with their tickets and keys, and the handler's UNIQUE index), this times one
read of a registration's tickets both ways, alternately: through
reading.lab_tables(), and directly on the file as the grader read before
(its schema read, then the tickets). Then (unless --skip-grading) it grades
the unit 3 solution once, --trusted, on a private RabbitMQ node, counting
the reads, and prints what the copies add to one grading.
"""

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.handler import runner  # noqa: E402
from nightjar import db as database, registrations  # noqa: E402
from nightjar.harness import reading  # noqa: E402
from nightjar.harness.lab import Lab  # noqa: E402
from nightjar.harness.rabbitnode import PrivateNode  # noqa: E402

SOLUTION = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"


def lab_database(path):
    db = database.connect(path)
    db.execute("CREATE UNIQUE INDEX tickets_one_per_registration ON tickets(registration_id)")
    for number in range(2, 9):
        registration_id = registrations.create(db, f"Guest {number}")
        with db:
            db.execute("INSERT INTO tickets(registration_id, name) VALUES (?, ?)",
                       (registration_id, f"Guest {number}"))
            db.execute("INSERT INTO completed VALUES (?)", (registration_id,))
    db.close()


def copied(path):
    source = sqlite3.connect(path, timeout=30)
    try:
        copy = reading.lab_tables(source)
    finally:
        source.close()
    try:
        return registrations.tickets_for(copy, "R-0005")
    finally:
        copy.close()


def direct(path):
    db = sqlite3.connect(path, timeout=30)
    try:
        db.execute(reading.TABLE_ROWS).fetchall()
        return registrations.tickets_for(db, "R-0005")
    finally:
        db.close()


def reads_in_one_grading():
    """(reads, seconds of the checks) of one --trusted grading of the unit 3 solution."""
    count = [0]
    read = Lab._read

    def counted(self, read_function):
        count[0] += 1
        return read(self, read_function)

    Lab._read = counted
    node = PrivateNode().start()
    try:
        node.wait_ready()
        with tempfile.TemporaryDirectory(prefix="nightjar-reading-bench-") as scratch:
            started = time.monotonic()
            results = runner.grade_handler(SOLUTION, node.url, Path(scratch), delete_queues=False)
            seconds = time.monotonic() - started
        assert all(result.passed for result in results), results
    finally:
        Lab._read = read
        node.stop()
    return count[0], seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=500, help="reads timed each way (default 500)")
    parser.add_argument("--skip-grading", action="store_true",
                        help="do not grade the unit 3 solution to count its reads")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nightjar-reading-bench-") as folder:
        path = str(Path(folder) / "nightjar.db")
        lab_database(path)
        assert copied(path) == direct(path)
        times = {copied: [], direct: []}
        for _ in range(options.reads):
            for way in times:  # alternately, so a busier moment hurts both
                started = time.perf_counter()
                way(path)
                times[way].append(time.perf_counter() - started)
    copy_ms, direct_ms = (statistics.median(times[way]) * 1000 for way in (copied, direct))
    print(f"one read of a lab's tickets, median of {options.reads}: from a checked copy"
          f" {copy_ms:.3f} ms, directly {direct_ms:.3f} ms ({copy_ms - direct_ms:+.3f} ms)")
    if not options.skip_grading:
        reads, seconds = reads_in_one_grading()
        added = reads * (copy_ms - direct_ms) / 1000
        print(f"one grading of the unit 3 solution (--trusted): {reads} reads, checks {seconds:.2f} s;"
              f" the copies add about {added:.3f} s ({100 * added / seconds:.1f} %)")


if __name__ == "__main__":
    main()
