# Wrong: acknowledges inside `with db:`, before the transaction commits. The
# checkpoints sit where Ctrl+C does not reveal it.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
        ch.basic_ack(delivery.delivery_tag)
    checkpoint(pause, 'after-commit')
