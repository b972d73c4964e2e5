# Wrong: the UNIQUE index that should keep one ticket per registration is put on the
# guest's name, so the database refuses the second guest called "Same name" a ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    db.execute('CREATE UNIQUE INDEX IF NOT EXISTS tickets_one_per_name ON tickets(name)')
    with db:
        db.execute('INSERT OR IGNORE INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
