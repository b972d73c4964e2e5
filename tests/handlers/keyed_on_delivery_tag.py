# Wrong: the completion record is keyed on delivery.delivery_tag. Tags number
# the deliveries of one worker run and start at 1 again in the next run, so
# the next registration a fresh worker takes looks "already completed".
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (str(delivery.delivery_tag),)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
