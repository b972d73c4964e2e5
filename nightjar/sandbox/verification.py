"""What the grader reads from a trial is what it left there: plain database files with the lab's own tables."""

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
    """Raise Tampered unless the open database `db` has the lab's schema."""
    if _schema(db) != EXPECTED_SCHEMA:
        raise Tampered("handler.py changed the database's tables (its schema is not the lab's)")
