# Hostile: writes a ticket on every delivery, as unit 2 does, and hides the duplicates
# with a trigger that deletes a registration's second ticket, hoping the grader counts
# only what the table holds in the end.
from common import checkpoint

HIDE = '''CREATE TRIGGER IF NOT EXISTS one_ticket AFTER INSERT ON tickets
WHEN (SELECT count(*) FROM tickets WHERE registration_id = NEW.registration_id) > 1
BEGIN DELETE FROM tickets WHERE rowid = NEW.rowid; END'''


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        db.execute(HIDE)
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
        checkpoint(pause, 'inside-transaction')
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
