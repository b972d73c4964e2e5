"""Copies of the learner's files and database in <Workstation>/.backups/, made before they are replaced."""

import shutil
import sqlite3
import time


def new_copy_path(folder, stem, suffix):
    """folder/<stem>-<timestamp><suffix>, numbered -2, -3, ... so an older copy is never overwritten."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder / f"{stem}-{stamp}{suffix}"
    n = 2
    while target.exists():
        target = folder / f"{stem}-{stamp}-{n}{suffix}"
        n += 1
    return target


def backup(path, folder):
    """Copy `path` into folder; the copy's path."""
    target = new_copy_path(folder, path.stem, path.suffix)
    shutil.copy2(path, target)
    return target


def backup_database(db, folder):
    """A consistent copy of the open database (SQLite's backup API); the copy's path."""
    target = new_copy_path(folder, "nightjar", ".db")
    copy = sqlite3.connect(target)
    try:
        db.backup(copy)
    finally:
        copy.close()
    return target
