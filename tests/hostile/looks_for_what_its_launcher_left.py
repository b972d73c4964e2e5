# Hostile: looks for what the process it was started from may have left it: descriptors it
# did not open, its parent's and its own uid's other processes' environment, and, in its own
# memory (gc.get_objects() and its data pages), the grader's environment, another trial's
# folder (an earlier run's, elsewhere) and a socket it did not make. It raises with what it found, so it
# lands in the report (short: a reason keeps 200 characters).
import gc
import os
import re
import socket

GRADER = re.compile(rb"grader-env-[0-9a-f]{32}")  # the tests' secret in the grader's environment
TRIAL = re.compile(rb"/sandbox/trials/([0-9a-f]{16})")  # a trial's folder: another trial's is a leftover


def descriptors():
    """Its descriptors beyond 0-2 that are not a worker's own (its AMQP connection, pika's
    epoll, its database and history files)."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue  # the listing's own descriptor
        if target.startswith("socket:"):
            with socket.socket(fileno=os.dup(int(name))) as sock:
                target = sock.family.name
        own = (target in ("AF_INET", "anon_inode:[eventpoll]")
               or os.path.basename(target).startswith("nightjar."))
        if int(name) > 2 and not own:
            found.append(f"{name}={target[:10]}")
    return found


def others():
    """Its parent's and every other process of its uid: is their environment readable?"""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            status = open(f"/proc/{pid}/status").read()
        except OSError:
            continue
        uid = int(re.search(r"Uid:\s+(\d+)", status).group(1))
        if int(pid) == os.getppid() or uid == os.getuid():
            try:
                if open(f"/proc/{pid}/environ", "rb").read():  # (an ending process's is empty)
                    found.append(f"{pid}:READ")
            except OSError as error:
                found.append(f"{pid}:{type(error).__name__[:5]}")
    return found


def memory():
    """Every page of this process's own data (heap and anonymous mappings), joined."""
    pages = []
    with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb") as mem:
        for line in maps:
            fields = line.split()
            start, end = (int(part, 16) for part in fields[0].split("-"))
            if fields[1].startswith("rw") and (len(fields) < 6 or fields[5] in ("[heap]", "[stack]")):
                try:
                    mem.seek(start)
                    pages.append(mem.read(end - start))
                except (OSError, OverflowError, ValueError):
                    pass
    return b"\0".join(pages)


def handle(ch, delivery, job, db, pause):
    own = os.path.basename(os.environ.get("HOME", "")).encode()
    objects = gc.get_objects()
    texts = [o.encode(errors="replace") for o in objects
             if isinstance(o, str) and ("/sandbox/trials/" in o or "grader-env-" in o)]
    sockets = [o for o in objects if isinstance(o, socket.socket) and o.family == socket.AF_UNIX]
    pages = memory()
    in_objects = {m for t in texts for m in TRIAL.findall(t)} - {own}
    in_pages = set(TRIAL.findall(pages)) - {own}
    grader = sum(bool(GRADER.search(t)) for t in texts) + len(GRADER.findall(pages))
    raise RuntimeError(f"fds {' '.join(descriptors()) or 'none'}; procs {' '.join(others()) or 'none'};"
                       f" earlier {len(in_objects)}/{len(in_pages)}; grader {grader};"
                       f" unix {len(sockets)}")
