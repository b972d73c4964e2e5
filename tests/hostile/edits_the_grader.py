# Hostile: appends to the grader's own code in the checkout, and to the lab's
# packages it runs on, so that later gradings pass everything.
from common import checkpoint

PASS_ALL = "\nCHECKS = []  # every check passes now\n"


def handle(ch, delivery, job, db, pause):
    for path in ("__CHECKOUT__/grader/handler/checks.py", "/opt/nightjar/lib/nightjar/events.py",
                 "__CHECKOUT__/nightjar/runtime/worker_runtime.py"):
        try:
            with open(path, "a") as code:
                code.write(PASS_ALL)
        except OSError:
            pass
    checkpoint(pause, 'before-write')
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)',
                   (job['id'], job['name']))
    checkpoint(pause, 'after-commit')
    ch.basic_ack(delivery.delivery_tag)
