# Right: a plain INSERT into completed; the primary key refuses a repeat, and
# the IntegrityError rolls the whole transaction back, ticket included.
import sqlite3

from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    try:
        with db:
            db.execute('INSERT INTO completed VALUES (?)', (job['id'],))
            checkpoint(pause, 'inside-transaction')
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    except sqlite3.IntegrityError:
        pass  # already completed earlier: nothing to write
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
