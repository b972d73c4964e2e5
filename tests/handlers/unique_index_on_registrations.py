# Wrong: writes tickets as the unit 3 solution does, but also makes guests' names unique
# in the site's own table, so the site can no longer save a second guest called
# "Same name".
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    db.execute('CREATE UNIQUE INDEX IF NOT EXISTS one_guest_per_name ON registrations(name)')
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)', (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
