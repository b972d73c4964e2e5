# Wrong: the name is folded to plain ASCII, so Siobhán's ticket says Siobhan.
import unicodedata

from common import checkpoint


def handle(ch, delivery, job, db, pause):
    name = unicodedata.normalize('NFKD', job['name']).encode('ascii', 'ignore').decode()
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], name))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
