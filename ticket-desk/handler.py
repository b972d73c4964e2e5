from common import checkpoint


# The worker calls handle() once for each registration it receives.
#   ch       the RabbitMQ channel the message arrived on
#   delivery RabbitMQ's delivery details (delivery.delivery_tag, delivery.redelivered)
#   job      the registration, e.g. {'id': 'R-0002', 'name': 'Normal guest'}
#   db       the ticket database (SQLite); `with db:` commits the writes inside it
#   pause    used by checkpoint(): python3 worker.py --pause before-write stops there
def handle(ch, delivery, job, db, pause):
    # Acknowledge: tell RabbitMQ it may delete this delivery.
    # (This happens before the ticket is written. Is that safe?)
    ch.basic_ack(delivery.delivery_tag)
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
