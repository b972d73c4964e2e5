# Wrong: the completion key is committed in a transaction of its own, before
# the ticket. A crash between the two leaves the ID "completed" with no ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
    checkpoint(pause, 'inside-transaction')
    if added:
        with db:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
