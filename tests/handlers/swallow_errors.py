# Wrong: any error is printed and swallowed, and the delivery acknowledged anyway.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    try:
        checkpoint(pause, 'before-write')
        with db:
            added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                               (job['id'],)).rowcount
            checkpoint(pause, 'inside-transaction')
            if added:
                db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                           (job['id'], job['name']))
        checkpoint(pause, 'after-commit')
    except Exception as error:
        print('Could not write the ticket:', error)
    ch.basic_ack(delivery.delivery_tag)
