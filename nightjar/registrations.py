"""Registrations and their tickets: creating, reading, and what looks wrong."""

import unicodedata
from dataclasses import dataclass, field

MAX_NAME_LENGTH = 80


class InvalidName(ValueError):
    """A guest name that cannot be registered; the text says why."""


def clean_name(raw):
    """The guest name, trimmed, or InvalidName.

    Names are data: any script (日本語, emoji, quotes) is fine; only empty
    names, over-long names and control characters are refused.
    """
    name = " ".join((raw or "").split())
    if not name:
        raise InvalidName("Please enter a guest name.")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"A guest name can be at most {MAX_NAME_LENGTH} characters.")
    if any(unicodedata.category(ch) in ("Cc", "Cf", "Cs") for ch in name):
        raise InvalidName("A guest name cannot contain control characters.")
    return name


def tickets_phrase(tickets, word="ticket"):
    """'ticket 2', 'tickets 2, 3' or 'no ticket' (tickets: Tickets or their numbers; word: e.g. 'extra ticket')."""
    if not tickets:
        return f"no {word}"
    numbers = ", ".join(str(getattr(t, "number", t)) for t in tickets)
    return f"{word} {numbers}" if len(tickets) == 1 else f"{word}s {numbers}"


@dataclass
class Ticket:
    number: int
    registration_id: str
    name: str
    issued_at: str


@dataclass
class Registration:
    id: str
    name: str
    created_at: str
    queued_at: str | None
    completed: bool
    tickets: list = field(default_factory=list)

    @property
    def problems(self):
        """What a person should look at, in plain words."""
        found = []
        if not self.tickets:
            found.append("waiting for its ticket" if self.queued_at else "waiting to be queued")
            if self.completed:
                found.append("marked completed without a ticket")
        if len(self.tickets) > 1:
            found.append(f"duplicate tickets ({len(self.tickets)})")
        if any(t.name != self.name for t in self.tickets):
            found.append("ticket name differs from the registration")
        return found


def create(db, name):
    """Save a new registration and return its ID (R-0002, ...).

    BEGIN IMMEDIATE holds the write lock from reading the highest ID to
    inserting the next one, so concurrent registrations never share an ID.
    """
    name = clean_name(name)
    db.execute("BEGIN IMMEDIATE")
    try:
        (highest,) = db.execute(
            "SELECT COALESCE(MAX(CAST(substr(id, 3) AS INTEGER)), 0) FROM registrations"
        ).fetchone()
        registration_id = f"R-{highest + 1:04d}"
        db.execute("INSERT INTO registrations (id, name) VALUES (?, ?)", (registration_id, name))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return registration_id


def mark_queued(db, registration_id):
    with db:
        db.execute(
            "UPDATE registrations SET queued_at = strftime('%Y-%m-%dT%H:%M:%SZ', 'now') WHERE id = ?",
            (registration_id,),
        )


def unqueued(db, older_than_seconds):
    """(id, name) of registrations saved while the broker was unreachable."""
    return db.execute(
        "SELECT id, name FROM registrations WHERE queued_at IS NULL"
        " AND created_at <= strftime('%Y-%m-%dT%H:%M:%SZ', 'now', ?) ORDER BY id",
        (f"-{older_than_seconds} seconds",),
    ).fetchall()


def tickets_for(db, registration_id):
    rows = db.execute(
        "SELECT number, registration_id, name, issued_at FROM tickets"
        " WHERE registration_id = ? ORDER BY number",
        (registration_id,),
    )
    return [Ticket(*row) for row in rows]


def get(db, registration_id):
    """The registration with its tickets, or None."""
    row = db.execute(
        "SELECT r.id, r.name, r.created_at, r.queued_at, c.id IS NOT NULL"
        " FROM registrations r LEFT JOIN completed c ON c.id = r.id WHERE r.id = ?",
        (registration_id,),
    ).fetchone()
    if row is None:
        return None
    registration = Registration(*row[:4], completed=bool(row[4]))
    registration.tickets = tickets_for(db, registration_id)
    return registration


def get_ticket(db, number):
    row = db.execute(
        "SELECT number, registration_id, name, issued_at FROM tickets WHERE number = ?", (number,)
    ).fetchone()
    return Ticket(*row) if row else None


def all_registrations(db):
    """Every registration with its tickets, in ID order, in two queries."""
    rows = db.execute(
        "SELECT r.id, r.name, r.created_at, r.queued_at, c.id IS NOT NULL"
        " FROM registrations r LEFT JOIN completed c ON c.id = r.id"
        " ORDER BY CAST(substr(r.id, 3) AS INTEGER)"
    ).fetchall()
    registrations = {row[0]: Registration(*row[:4], completed=bool(row[4])) for row in rows}
    for ticket in all_tickets(db):
        if ticket.registration_id in registrations:
            registrations[ticket.registration_id].tickets.append(ticket)
    return list(registrations.values())


def all_tickets(db):
    """Every ticket, in number order."""
    rows = db.execute("SELECT number, registration_id, name, issued_at FROM tickets ORDER BY number")
    return [Ticket(*row) for row in rows]
