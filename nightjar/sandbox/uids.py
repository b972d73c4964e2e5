"""The uid pool: a block of uids per sandbox, one lock file per block, never two sandboxes on one block.

A sandbox takes a block for as long as it runs; its trials are uids of that
block. Processes left by a grader that was killed outright are killed
before the block is used again.
"""

import fcntl
import os
import signal
import stat
from pathlib import Path

from .machine import Unavailable

# Where a block's lock file lives (root only); a block is BLOCK uids from the base.
LOCKS = Path("/run/nightjar-sandbox")
UID_BASE_ENV = "NIGHTJAR_SANDBOX_UID_BASE"
UID_BASE = 2_000_000_000
BLOCK = 16
BLOCKS = 4096


def first_uid(block):
    """The first uid of `block` (NIGHTJAR_SANDBOX_UID_BASE moves the base)."""
    return int(os.environ.get(UID_BASE_ENV) or UID_BASE) + BLOCK * block


def take_block():
    """(block number, lock fd) of a uid block no other sandbox on this machine holds."""
    LOCKS.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(LOCKS)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o077:
        raise Unavailable(f"{LOCKS} must be a folder only root can use")
    for block in range(BLOCKS):
        fd = os.open(LOCKS / f"block-{block}", os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return block, fd
        except BlockingIOError:
            os.close(fd)
    raise Unavailable(f"all {BLOCKS} sandbox uid blocks are in use")


def kill_uids(first, count):
    """Kill every process whose real or effective uid is in [first, first+count): what a block left."""
    for _ in range(50):
        found = []
        for entry in Path("/proc").glob("[0-9]*"):
            try:
                uids = next(line for line in (entry / "status").read_text().splitlines()
                            if line.startswith("Uid:")).split()[1:3]
            except (OSError, StopIteration):
                continue
            if any(first <= int(uid) < first + count for uid in uids):
                found.append(int(entry.name))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
