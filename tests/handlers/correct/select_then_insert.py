# Right: look for the completion record first, all inside one transaction.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        done = db.execute('SELECT 1 FROM completed WHERE id = ?', (job['id'],)).fetchone()
        if not done:
            db.execute('INSERT INTO completed VALUES (?)', (job['id'],))
            checkpoint(pause, 'inside-transaction')
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
