# Right: an upsert that does nothing on a repeat; its rowcount says whether the
# key is new.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        cursor = db.execute('INSERT INTO completed(id) VALUES (?) ON CONFLICT(id) DO NOTHING',
                            (job['id'],))
        checkpoint(pause, 'inside-transaction')
        if cursor.rowcount:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
