# Wrong: "a redelivery was already handled" -- but a redelivery may be work
# that never finished (the worker stopped before the write).
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    if delivery.redelivered:
        ch.basic_ack(delivery.delivery_tag)
        return
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
