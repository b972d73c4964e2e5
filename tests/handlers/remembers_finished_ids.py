# Wrong: remembers finished registrations in the worker process, not in the
# database, so a new worker run (after a crash, or a restart) forgets them.
from common import checkpoint

finished = set()


def handle(ch, delivery, job, db, pause):
    if job['id'] in finished:
        ch.basic_ack(delivery.delivery_tag)
        return
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    finished.add(job['id'])
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
