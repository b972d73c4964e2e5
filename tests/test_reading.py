"""How the grader reads a lab's tables (nightjar/harness/reading.py), on real SQLite files a
handler could leave: its own indexes change and break nothing, a forged index fools no read,
and what could forge a read is refused with its name."""

import sqlite3

import pytest

from nightjar import db as database
from nightjar.harness import reading

COUNT = "SELECT number FROM tickets WHERE registration_id = 'R-0002' ORDER BY number"


def lab_db(tmp_path, *statements, connection=None):
    """A lab database after handler-like statements; its path."""
    path = tmp_path / "nightjar.db"
    db = database.connect(path)
    if connection:
        connection(db)
    with db:
        for statement in statements:
            db.execute(statement)
    db.close()
    return path


def read(path, query, *, timeout=30):
    source = sqlite3.connect(path, timeout=timeout)
    try:
        copy = reading.lab_tables(source)
    finally:
        source.close()
    try:
        return copy.execute(query).fetchall()
    finally:
        copy.close()


def test_a_forged_index_changes_no_read(tmp_path):
    """An index holding only some rows, its schema rewritten to claim all: SQLite itself
    reads through it, the grader's copy reads the rows."""
    path = lab_db(tmp_path, "DROP INDEX tickets_by_registration",
                  "CREATE INDEX only_some ON tickets(registration_id) WHERE number < 3",
                  *["INSERT INTO tickets(registration_id, name) VALUES ('R-0002', 'Guest')"] * 3)
    db = sqlite3.connect(path)
    db.execute("PRAGMA writable_schema = ON")
    with db:
        db.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX only_some ON"
                   " tickets(registration_id)' WHERE name = 'only_some'")
    db.close()
    db = sqlite3.connect(path)
    try:
        assert db.execute(COUNT).fetchall() == [(2,)]  # what the forgery shows a plain read
    finally:
        db.close()
    assert read(path, COUNT) == [(2,), (3,), (4,)]


def test_indexes_only_the_handlers_connection_can_use_break_no_read(tmp_path):
    def own_function_and_collation(db):
        db.create_function("key_of", 1, str.upper, deterministic=True)
        db.create_collation("loose", lambda a, b: (a.lower() > b.lower()) - (a.lower() < b.lower()))

    path = lab_db(tmp_path, "CREATE UNIQUE INDEX by_key ON tickets(key_of(registration_id))",
                  "CREATE UNIQUE INDEX one_each ON tickets(registration_id)",
                  "CREATE INDEX by_name ON tickets(name COLLATE loose) WHERE key_of(name) > ''",
                  "INSERT INTO tickets(registration_id, name) VALUES ('R-0002', 'Guest')",
                  connection=own_function_and_collation)
    assert read(path, COUNT) == [(2,)]
    source = sqlite3.connect(path)
    copy = reading.lab_tables(source)
    try:
        assert reading.unique_indexes(copy, "tickets") == [
            ("by_key", "CREATE UNIQUE INDEX by_key ON tickets(key_of(registration_id))", "?"),
            ("one_each", "CREATE UNIQUE INDEX one_each ON tickets(registration_id)",
             "registration_id")]
    finally:
        copy.close()
        source.close()


@pytest.mark.parametrize("statement, reason", [
    ("CREATE VIEW seen AS SELECT * FROM tickets",
     "handler.py created the view 'seen' in the database; a view could change what the lab's"
     " tables seem to hold, so none is allowed"),
    ("CREATE TRIGGER hide AFTER INSERT ON tickets BEGIN DELETE FROM tickets"
     " WHERE rowid = NEW.rowid; END",
     "handler.py created the trigger 'hide' in the database; a trigger could change what the"
     " lab's tables seem to hold, so none is allowed"),
    ("ALTER TABLE tickets ADD COLUMN delivery_tag INTEGER",
     "handler.py changed the columns of the lab's table tickets; the grader reads the lab's"
     " tables as the lab made them, so leave their columns as they are (add tables of your own"
     " instead)"),
    ("DROP TABLE completed",
     "handler.py removed the lab's table completed; leave the lab's tables as they are (add"
     " tables of your own instead)"),
])
def test_what_could_forge_a_read_is_refused_with_its_name(tmp_path, statement, reason):
    path = lab_db(tmp_path, statement)
    with pytest.raises(reading.Tampered) as refused:
        read(path, COUNT)
    assert str(refused.value) == reason


def test_a_database_locked_for_good_fails_the_read_within_its_busy_timeout(tmp_path):
    path = lab_db(tmp_path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO completed VALUES ('R-0002')")
    try:
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            read(path, COUNT, timeout=0.2)
    finally:
        holder.close()


def test_an_index_refusing_the_sites_write_is_named(tmp_path):
    path = lab_db(tmp_path, "CREATE UNIQUE INDEX one_guest_per_name ON registrations(name)")
    db = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.IntegrityError) as error:
            db.execute("INSERT INTO registrations(id, name) VALUES ('R-0002', 'Mina Patel')")
        assert str(reading.refused_write(db, error.value, "saving a guest")) == (
            "saving a guest failed (UNIQUE constraint failed: registrations.name): handler.py's"
            " UNIQUE index 'one_guest_per_name' on registrations(name) refused it; no index may"
            " refuse the site's registrations")
    finally:
        db.close()
