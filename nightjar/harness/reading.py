"""What the grader reads from a lab's database: the lab's own tables, as their rows are.

handler.py writes the database through `db`, so it can also change the schema.
It may add tables and indexes of its own (its completion keys, a UNIQUE index
on tickets(registration_id)): the grader reads only the lab's tables, from a
copy with every index dropped and the tables' own keys rebuilt from their
rows (lab_tables()), so no index can change or break what it reads, on
either route (sandboxed or --trusted).

Refused (Tampered), because they would change what the lab's tables seem to
hold or what the grader reads there: a view, a trigger, a lab table whose
columns are not the lab's (changed, added or dropped). An index that refuses
or breaks the site's own writes (a registration, as the grader saves one) is
named when that write fails (refused_write()).
"""

import sqlite3

from .. import db as database

TABLE_ROWS = "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"


class Tampered(Exception):
    """A lab's database (or its files) is not what the grader can read as the lab's."""


def _lab_tables():
    """{name: CREATE TABLE statement} of the lab's tables, as sqlite_master lists them."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(database.SCHEMA)
        return {name: sql for kind, name, _, sql in db.execute(TABLE_ROWS) if kind == "table"}
    finally:
        db.close()


LAB_TABLES = _lab_tables()


def check_schema(db):
    """Raise Tampered unless the open database `db` holds the lab's tables as the lab made them,
    and no view or trigger. SQLite's names ignore case, so they are compared in lower case."""
    rows = db.execute(TABLE_ROWS).fetchall()
    for kind, name, _, _ in rows:
        if kind in ("view", "trigger"):
            raise Tampered(f"handler.py created the {kind} {name!r} in the database; a {kind}"
                           " could change what the lab's tables seem to hold, so none is allowed")
    tables = {name.lower(): sql for kind, name, _, sql in rows if kind == "table"}
    for name, sql in LAB_TABLES.items():
        if name not in tables:
            raise Tampered(f"handler.py removed the lab's table {name}; leave the lab's tables"
                           " as they are (add tables of your own instead)")
        if tables[name] != sql:
            raise Tampered(f"handler.py changed the columns of the lab's table {name}; the"
                           " grader reads the lab's tables as the lab made them, so leave their"
                           " columns as they are (add tables of your own instead)")


def lab_tables(db):
    """A copy in memory of the open database `db` to read the lab's tables from, or Tampered.

    The copy is checked (check_schema), then every index is dropped from it
    and the tables' own keys are rebuilt from their rows: an index of the
    handler's (an expression calling a function only its connection had, a
    collation of its own) or an index whose content was forged cannot
    change or break a read. What the indexes were stays in the copy's table
    temp.indexes (name, tbl_name, sql, unique_key: the columns of a UNIQUE
    index, "?" for an expression; see unique_indexes()). The caller closes it.
    """
    copy = sqlite3.connect(":memory:")
    try:
        _copy(db, copy)
        try:
            copy.execute("PRAGMA trusted_schema = OFF")
            check_schema(copy)
            copy.execute("CREATE TEMP TABLE indexes (name, tbl_name, sql, unique_key)")
            for name, table, sql in copy.execute("SELECT name, tbl_name, sql FROM sqlite_master"
                                                 " WHERE type = 'index' AND sql IS NOT NULL"
                                                 ).fetchall():
                copy.execute("INSERT INTO temp.indexes VALUES (?, ?, ?, ?)",
                             (name, table, sql, _unique_key(copy, name, table)))
                copy.execute(f"DROP INDEX main.{quoted(name)}")
            for name in LAB_TABLES:
                copy.execute(f"REINDEX main.{name}")
        except sqlite3.DatabaseError as error:
            raise Tampered(f"the grader could not read the database handler.py left ({error})"
                           ) from None
    except BaseException:
        copy.close()
        raise
    return copy


def _copy(db, copy):
    """Copy the database `db` into `copy`, waiting for a writer no longer than db's busy timeout
    (a backup alone would wait for ever)."""
    db.execute("BEGIN")
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # takes the read lock
        db.backup(copy)
    finally:
        db.rollback()


def _unique_key(db, index, table):
    """'registration_id', 'name', '?' (an expression)...: a UNIQUE index's columns; None if not UNIQUE."""
    (unique,) = db.execute('SELECT "unique" FROM pragma_index_list(?) WHERE name = ?',
                           (table, index)).fetchone()
    if not unique:
        return None
    return ", ".join(column or "?" for (column,) in
                     db.execute("SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,)))


def unique_indexes(copy, table):
    """[(name, sql, unique_key)] of the UNIQUE indexes on `table` in a lab_tables() copy."""
    return copy.execute("SELECT name, sql, unique_key FROM temp.indexes"
                        " WHERE lower(tbl_name) = ? AND unique_key IS NOT NULL ORDER BY name",
                        (table,)).fetchall()


def describe_index(name, sql):
    """"UNIQUE index 'x' on tickets(name)": an index of the handler's, in a reason."""
    unique = "UNIQUE " if sql.split()[1].upper() == "UNIQUE" else ""
    on = " ".join(sql.split()).split(" ON ", 1)[-1]
    return f"{unique}index {name!r} on {on}"


def quoted(name):
    """An SQL identifier for any name (a handler names its indexes as it likes)."""
    return '"' + name.replace('"', '""') + '"'


def refused_write(db, error, what):
    """The Tampered to raise when the site's own write (`what`, in words) failed with `error`
    on the open database `db` because of an index of the handler's on registrations, else None."""
    if not (isinstance(error, sqlite3.IntegrityError) or "no such" in str(error)):
        return None
    indexes = sorted(((sql.split()[1].upper() != "UNIQUE", name, sql)
                      for kind, name, table, sql in db.execute(TABLE_ROWS)
                      if kind == "index" and table.lower() == "registrations" and sql))
    if not indexes:
        return None
    _, name, sql = indexes[0]
    return Tampered(f"{what} failed ({error}): handler.py's {describe_index(name, sql)} refused"
                    " it; no index may refuse the site's registrations")
