# Right, though its log lines sound like the worker's own error messages.
import sys

from common import checkpoint


def handle(ch, delivery, job, db, pause):
    print('handler.py raised an error? No: all is well.', file=sys.stderr)
    print('handler.py could not be loaded; acknowledging it twice would close the channel.',
          file=sys.stderr)
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    print('handler.py returned without acknowledging? It left a transaction open? Never.',
          file=sys.stderr)
    ch.basic_ack(delivery.delivery_tag)
    print(f'Received {job["id"]} redelivered=True', flush=True)
