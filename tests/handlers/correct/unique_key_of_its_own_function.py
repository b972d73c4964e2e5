# Right, though its index is odd: the UNIQUE index keys tickets on a function only
# handler.py's own connection knows. No other connection can write a ticket (or read
# through that index), so the grader must read the tickets without it.
from common import checkpoint


def registration_key(registration_id):
    return registration_id.strip().upper()


def handle(ch, delivery, job, db, pause):
    db.create_function('registration_key', 1, registration_key, deterministic=True)
    db.execute('CREATE UNIQUE INDEX IF NOT EXISTS tickets_by_key'
               ' ON tickets(registration_key(registration_id))')
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT OR IGNORE INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
