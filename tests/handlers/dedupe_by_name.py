# Wrong: treats a guest name as the identity of a registration, so the second
# guest called "Same name" never gets a ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        exists = db.execute('SELECT 1 FROM tickets WHERE name = ?',
                            (job['name'],)).fetchone()
        checkpoint(pause, 'inside-transaction')
        if not exists:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
