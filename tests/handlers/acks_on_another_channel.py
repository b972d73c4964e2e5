# Wrong: acknowledges on a new channel of its own; a delivery tag belongs to
# the channel that delivered it, so the job stays unacknowledged.
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
    checkpoint(pause, 'after-commit')
    ch.connection.channel().basic_ack(delivery.delivery_tag)
