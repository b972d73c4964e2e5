# Wrong: on an error the delivery is nacked with requeue=False, which moves it
# to the dead-letter queue: no worker takes it again and it never gets a ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    try:
        checkpoint(pause, 'before-write')
        with db:
            added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                               (job['id'],)).rowcount
            checkpoint(pause, 'inside-transaction')
            if added:
                db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                           (job['id'], job['name']))
        checkpoint(pause, 'after-commit')
    except Exception:
        ch.basic_nack(delivery.delivery_tag, requeue=False)
        return
    ch.basic_ack(delivery.delivery_tag)
