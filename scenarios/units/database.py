"""The live database at a unit's start: what setup compares, and resetting it to that start."""

from pathlib import Path

from nightjar import db as database, registrations

from . import words
from .backups import backup_database
from .common import say


def snapshot(db):
    """What setup compares: registrations, tickets, completion records, the next ticket number."""
    return (
        db.execute("SELECT id, name, queued_at IS NOT NULL FROM registrations ORDER BY id").fetchall(),
        db.execute("SELECT number, registration_id, name FROM tickets ORDER BY number").fetchall(),
        db.execute("SELECT id FROM completed ORDER BY id").fetchall(),
        db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'tickets'").fetchall(),
    )


def reset_database(db, guests):
    """Only the seeded Mina Patel, then each guest as R-0002, R-0003, ... with one ticket.

    The guests were processed by the handlers of the earlier units, which do
    not record completion, so they have no completion record.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        for table in ("tickets", "completed", "registrations"):
            db.execute(f"DELETE FROM {table}")
        db.execute("DELETE FROM sqlite_sequence WHERE name = 'tickets'")
        for sql, params in database.SEED:
            db.execute(sql, params)
        for number, name in enumerate(guests, start=2):
            registration_id = f"R-{number:04d}"
            db.execute("INSERT INTO registrations (id, name, queued_at)"
                       " VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))",
                       (registration_id, name))
            db.execute("INSERT INTO tickets (registration_id, name) VALUES (?, ?)",
                       (registration_id, name))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def state_of(guests):
    """The snapshot of a database at a start with these guests (built in memory)."""
    db = database.connect(":memory:")
    try:
        reset_database(db, guests)
        return snapshot(db)
    finally:
        db.close()


def prepare_database(unit, settings, backups):
    existed = Path(settings.db_path).is_file()
    db = database.connect(settings.db_path)
    try:
        current = snapshot(db)
        if current == state_of(unit.start_guests):
            say(words.line("database_already" if existed else "database_created", path=settings.db_path))
        elif not existed:
            reset_database(db, unit.start_guests)
            say(words.line("database_created", path=settings.db_path))
        else:
            saved = backup_database(db, backups) if current != state_of(()) else None
            reset_database(db, unit.start_guests)
            say(words.line("database_reset", path=settings.db_path,
                           registrations=words.count(len(current[0]), "registration"),
                           tickets=words.count(len(current[1]), "ticket"),
                           completed=words.count(len(current[2]), "completion record")))
            if saved:
                say(words.line("your_copy", saved=saved))
        for r in registrations.all_registrations(db):
            say(words.line("registration", id=r.id, name=r.name, tickets=words.tickets(r.tickets)))
    finally:
        db.close()
