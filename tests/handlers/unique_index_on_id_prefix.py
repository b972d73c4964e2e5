# Wrong: a UNIQUE expression index on the start of the ID: R-0001 to R-0009 share
# "R-000", so every registration after R-0001 counts as a repeat and gets no ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    db.execute('CREATE UNIQUE INDEX IF NOT EXISTS tickets_one_per_series'
               ' ON tickets(substr(registration_id, 1, 5))')
    with db:
        db.execute('INSERT OR IGNORE INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
