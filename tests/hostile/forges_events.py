# Hostile: never acknowledges, but writes the ack the grader's event record would hold
# (and a received event for a redelivery), hoping the grader believes its own file.
import json
import os

from common import checkpoint


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
    path = os.environ.get("NIGHTJAR_EVENTS")
    if path:
        with open(path, "a") as events:
            events.write(json.dumps({"event": "ack", "tag": delivery.delivery_tag,
                                     "multiple": False}) + "\n")
    ch.acknowledged.add(delivery.delivery_tag)  # the worker's own note, too
