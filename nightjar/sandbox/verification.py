"""What the grader reads from a trial is what it left there: plain database files with the lab's own tables.

A handler may add tables of its own (say, its completion keys): the grader
reads only the lab's tables, so those decide nothing. What could make the
lab's tables read other than they are is refused: a changed lab table or
index, an index of the handler's on a lab table, a view or a trigger.
"""

import os
import sqlite3
import stat

from .. import db as database

DB_FILES = ("nightjar.db", "nightjar.db-wal", "nightjar.db-shm", "nightjar.db-journal")


class Tampered(Exception):
    """A trial's files are not what the grader left there (a link, a pipe, another schema)."""


def expected_schema():
    """The lab database's schema as sqlite_master lists it."""
    db = sqlite3.connect(":memory:")
    try:
        for statement in database.SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        return _schema(db)
    finally:
        db.close()


def _schema(db):
    return sorted(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"
                             " WHERE name NOT LIKE 'sqlite_%'").fetchall())


EXPECTED_SCHEMA = expected_schema()
LAB_TABLES = {tbl_name for _, _, tbl_name, _ in EXPECTED_SCHEMA}


def check_files(folder):
    """Raise Tampered unless the lab's database files in `folder` are plain files."""
    for name in DB_FILES:
        try:
            info = os.lstat(folder / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise Tampered(f"handler.py replaced {name} in its lab with something that is not"
                           " a file")


def check_schema(db):
    """Raise Tampered unless the lab's tables in the open database `db` are the lab's own.

    SQLite's names ignore case, so they are compared in lower case.
    """
    schema = _schema(db)
    for kind, name, _, _ in schema:
        if kind in ("view", "trigger"):
            raise Tampered(f"handler.py created the {kind} {name!r} in the database; a {kind}"
                           " could change what the lab's tables seem to hold, so none is allowed")
    lab_part = [row for row in schema if row[2].lower() in LAB_TABLES]
    if lab_part != EXPECTED_SCHEMA:
        changed = sorted({row[2] for row in set(lab_part) ^ set(EXPECTED_SCHEMA)})
        raise Tampered(f"handler.py changed the lab's table {changed[0]} (its columns or"
                       " indexes are not the lab's)")
