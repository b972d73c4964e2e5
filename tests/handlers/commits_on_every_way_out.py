# Wrong: commits in `finally`, on every way out of handle(), so an interruption
# half-way commits half the work (here the key and the ticket before Ctrl+C
# meant to undo them).
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    try:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    finally:
        db.commit()
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
