"""The SQLite database: schema, seed data and connections.

`connect()` creates the file (schema plus the seeded first registration) when
it does not exist yet, so a fresh NIGHTJAR_DB path is all a program needs.
"""

import sqlite3
from pathlib import Path

from . import history

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE registrations (
    id         TEXT PRIMARY KEY,            -- R-0001, R-0002, ...
    name       TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
    queued_at  TEXT                         -- NULL until RabbitMQ confirmed the job
);
-- No UNIQUE on registration_id: an unsafe handler must really be able to
-- write a duplicate ticket, or the lab would teach nothing.
-- AUTOINCREMENT: a ticket number deleted by a repair is never handed out again.
CREATE TABLE tickets (
    number          INTEGER PRIMARY KEY AUTOINCREMENT,
    registration_id TEXT NOT NULL,
    name            TEXT NOT NULL,
    issued_at       TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
CREATE INDEX tickets_by_registration ON tickets (registration_id);
-- One row per registration whose ticket work is finished (unit 3).
CREATE TABLE completed (id TEXT PRIMARY KEY);
"""

SEED = [
    ("INSERT INTO registrations (id, name, created_at, queued_at) VALUES (?, ?, ?, ?)",
     ("R-0001", "Mina Patel", "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")),
    ("INSERT INTO tickets (registration_id, name, issued_at) VALUES (?, ?, ?)",
     ("R-0001", "Mina Patel", "2026-01-01T00:00:00Z")),
    ("INSERT INTO completed (id) VALUES (?)", ("R-0001",)),
]


def connect(path):
    """Open the database read-write, creating it on first use.

    `with db:` commits on success and rolls back on an exception, as the
    handler lesson explains.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=30)
    # WAL lets the site read while the worker writes. FULL syncs every commit
    # to disk: a committed ticket is a promise to a guest and must survive a
    # power cut, and the lab's rate (a few commits a second) does not need
    # the speed NORMAL would buy.
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION and _create(db):
        # A new database starts a new story: an old delivery history beside it is not its own.
        history.remove(history.store_path(path))
    return db


def connect_readonly(path):
    """Open an existing database without any possibility of writing to it."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no database at {path}")
    uri = Path(path).resolve().as_uri() + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=30)


def read_without_writing(path, read):
    """read(connection) on the database, leaving every byte and file as it was.

    While a program has the database open, it has -wal and -shm files and
    mode=ro reads through them, seeing rows still only in the WAL. When none
    has it open, a mode=ro open would leave an empty -wal and -shm behind
    (and fails on a read-only mount); then the fully checkpointed file is
    read as immutable, and read again through mode=ro should a writer have
    appeared meanwhile.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no database at {path}")
    if not _side_files(path):
        db = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
        try:
            result = read(db)
        finally:
            db.close()
        if not _side_files(path):
            return result
    db = connect_readonly(path)
    try:
        return read(db)
    finally:
        db.close()


def _side_files(path):
    return any(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm"))


def _create(db):
    """Create the schema and seed; True when this call created them."""
    # BEGIN IMMEDIATE takes the write lock first, so two programs starting at
    # once cannot both create the schema; the second sees the version and stops.
    db.execute("BEGIN IMMEDIATE")
    try:
        created = db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION
        if created:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            for sql, params in SEED:
                db.execute(sql, params)
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return created
