# Right: the ticket is written only when no completion record exists yet.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) SELECT ?, ?'
                   ' WHERE NOT EXISTS (SELECT 1 FROM completed WHERE id = ?)',
                   (job['id'], job['name'], job['id']))
        checkpoint(pause, 'inside-transaction')
        db.execute('INSERT OR IGNORE INTO completed VALUES (?)', (job['id'],))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
