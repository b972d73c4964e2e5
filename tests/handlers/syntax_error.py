# Wrong: the indentation was lost when pasting.
from common import checkpoint


def handle(ch, delivery, job, db, pause):
checkpoint(pause, 'before-write')
with db:
db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
(job['id'], job['name']))
ch.basic_ack(delivery.delivery_tag)
