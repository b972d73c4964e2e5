# Hostile: leaves processes behind (a double fork and setsid escape the process group),
# one that would keep running long after its grading.
import os

from common import checkpoint


def escape():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sh", ["sh", "-c", "while :; do sleep 1; done", "__MARKER__"])
        os._exit(0)


def handle(ch, delivery, job, db, pause):
    for _ in range(3):
        escape()
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
