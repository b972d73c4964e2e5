# Hostile: allocates memory without end.
def handle(ch, delivery, job, db, pause):
    hoard = []
    while True:
        hoard.append(b"x" * (8 << 20))  # written, so really in memory
