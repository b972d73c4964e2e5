# Right: the connection's running count of changed rows says whether the
# completion key was new.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        before = db.total_changes
        db.execute('INSERT OR IGNORE INTO completed VALUES (?)', (job['id'],))
        checkpoint(pause, 'inside-transaction')
        if db.total_changes > before:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
