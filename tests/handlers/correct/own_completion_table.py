# Right, in a table of its own: the completion keys live in `processed`, made
# inside the ticket's transaction, so key and ticket commit together.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        db.execute('CREATE TABLE IF NOT EXISTS processed (registration_id TEXT PRIMARY KEY)')
        added = db.execute('INSERT OR IGNORE INTO processed VALUES (?)', (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added == 1:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
