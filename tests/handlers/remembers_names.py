# Wrong: remembers the names it has given a ticket in this worker run, so the
# second guest called "Same name" in one --drain run gets none.
from common import checkpoint

names_seen = set()


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added and job['name'] not in names_seen:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    names_seen.add(job['name'])
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
