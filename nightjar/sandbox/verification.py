"""What the grader reads from a trial is what it left there: plain database files.

The lab's tables inside them are read as nightjar/harness/reading.py reads
them on every route: from a checked copy that no index, view or trigger of
the handler's can change.
"""

import os
import stat

from ..harness.reading import Tampered

DB_FILES = ("nightjar.db", "nightjar.db-wal", "nightjar.db-shm", "nightjar.db-journal")


def check_files(folder):
    """Raise Tampered unless the lab's database files in `folder` are plain files."""
    for name in DB_FILES:
        try:
            info = os.lstat(folder / name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode):
            raise Tampered(f"handler.py replaced {name} in its lab with something that is not"
                           " a file")
