# Wrong: looks for a repeat only in the first delivery of a worker run ("only a
# restarted worker sees a repeat"), but a duplicate can arrive at any time.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added or delivery.delivery_tag > 1:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
