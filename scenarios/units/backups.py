"""Copies of the learner's files and database in <Workstation>/.backups/, made before they are replaced."""

import shutil
import sqlite3
import time


def backup(path, folder):
    """Copy `path` to folder/<name>-<timestamp><suffix> (never over an older copy); the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder / f"{path.stem}-{stamp}{path.suffix}"
    n = 2
    while target.exists():
        target = folder / f"{path.stem}-{stamp}-{n}{path.suffix}"
        n += 1
    shutil.copy2(path, target)
    return target


def backup_database(db, folder):
    """A consistent copy of the open database (SQLite's backup API); the copy's path."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder / f"nightjar-{stamp}.db"
    n = 2
    while target.exists():
        target = folder / f"nightjar-{stamp}-{n}.db"
        n += 1
    copy = sqlite3.connect(target)
    try:
        db.backup(copy)
    finally:
        copy.close()
    return target
