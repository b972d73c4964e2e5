# Right: microservices.io's idempotent consumer, "keep the message ID in the business
# entity": a UNIQUE index on tickets(registration_id) lets the database itself refuse a
# registration's second ticket, and the insert does nothing on a repeat.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    db.execute('CREATE UNIQUE INDEX IF NOT EXISTS tickets_one_per_registration'
               ' ON tickets(registration_id)')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)'
                   ' ON CONFLICT(registration_id) DO NOTHING', (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
