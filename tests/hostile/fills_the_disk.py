# Hostile: writes files until no space is left, wherever it may write.
import os
import tempfile


def handle(ch, delivery, job, db, pause):
    chunk = b"x" * (1 << 20)
    for number in range(100000):
        with open(os.path.join(tempfile.gettempdir(), f"filler-{number}"), "wb") as filler:
            for _ in range(8):
                filler.write(chunk)
