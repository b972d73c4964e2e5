"""Serve the site with waitress: python3 -m nightjar_site

NIGHTJAR_SITE_HOST (default 127.0.0.1) and NIGHTJAR_SITE_PORT (default 8000)
choose the address; containers set NIGHTJAR_SITE_HOST=0.0.0.0.
NIGHTJAR_SITE_THREADS (8) is waitress's number of threads, NIGHTJAR_SITE_CPU
the core they run on (default: the one the site starts on; "any": wherever
the kernel puts them). NIGHTJAR_SITE_PREFIX serves it under a path (a
course's lab console relays PREFIX/site/ to it).
"""

import logging
import os
import sys
import time

import waitress

from . import create_app, database, requeue

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def keep_to_one_core(choice):
    """Run the site's threads on one core: `choice` ("any", a core's number, or empty for the
    core it runs on now).

    Python runs one thread at a time, and the threads hand that turn over at
    every SQLite call and socket write; on a virtual machine a hand-over to a
    thread on another core is a wake-up across cores, and the registration
    page served 175-470 requests a second that way, 1,100 on one core
    (benchmarks/site_bench.py, 2 cores).
    """
    if choice == "any" or not hasattr(os, "sched_setaffinity"):
        return
    allowed = os.sched_getaffinity(0)
    if not choice:
        with open("/proc/self/stat") as stat:  # field 39: the core it last ran on
            choice = stat.read().rsplit(")", 1)[1].split()[36]
    if not choice.isdigit() or int(choice) not in allowed:
        sys.exit(f"NIGHTJAR_SITE_CPU is {choice!r}: say \"any\", or one of the cores this"
                 f" site may use: {', '.join(map(str, sorted(allowed)))}")
    os.sched_setaffinity(0, {int(choice)})  # the threads started from now on inherit it


class OncePerMinute(logging.Filter):
    """Lets one record through a minute. waitress warns "Task queue depth is N" for every
    request that waits for a thread: under load, thousands of lines a second, each costing
    the requests time."""

    def __init__(self):
        super().__init__()
        self.next_allowed = 0.0

    def filter(self, record):
        now = time.monotonic()
        if now < self.next_allowed:
            return False
        self.next_allowed = now + 60
        return True


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("waitress.queue").addFilter(OncePerMinute())
    host = os.environ.get("NIGHTJAR_SITE_HOST") or DEFAULT_HOST
    port = int(os.environ.get("NIGHTJAR_SITE_PORT") or DEFAULT_PORT)
    threads = int(os.environ.get("NIGHTJAR_SITE_THREADS") or 8)
    keep_to_one_core((os.environ.get("NIGHTJAR_SITE_CPU") or "").strip())
    app = create_app()
    database.init_db(app)
    requeue.start(app)
    shown = "127.0.0.1" if host == "0.0.0.0" else host
    print(f"Nightjar site on http://{shown}:{port}/", flush=True)
    waitress.serve(app, host=host, port=port, threads=threads, ident="Nightjar",
                   url_prefix=os.environ.get("NIGHTJAR_SITE_PREFIX", "").rstrip("/"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
