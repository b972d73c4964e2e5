# Wrong: the values are pasted into the SQL text. A name with a quote
# (Siobhán O'Neill) breaks the statement, and the guest never gets a ticket.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute(f"INSERT OR IGNORE INTO completed VALUES ('{job['id']}')").rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute(f"INSERT INTO tickets(registration_id,name)"
                       f" VALUES ('{job['id']}', '{job['name']}')")
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
