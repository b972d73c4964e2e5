"""Serve the site with waitress: python3 -m nightjar_site

NIGHTJAR_SITE_HOST (default 127.0.0.1) and NIGHTJAR_SITE_PORT (default 8000)
choose the address; containers set NIGHTJAR_SITE_HOST=0.0.0.0.
"""

import logging
import os
import sys

import waitress

from . import create_app, database, requeue

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def main():
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    host = os.environ.get("NIGHTJAR_SITE_HOST") or DEFAULT_HOST
    port = int(os.environ.get("NIGHTJAR_SITE_PORT") or DEFAULT_PORT)
    threads = int(os.environ.get("NIGHTJAR_SITE_THREADS") or 8)
    app = create_app()
    database.init_db(app)
    requeue.start(app)
    shown = "127.0.0.1" if host == "0.0.0.0" else host
    print(f"Nightjar site on http://{shown}:{port}/", flush=True)
    waitress.serve(app, host=host, port=port, threads=threads, ident="Nightjar")
    return 0


if __name__ == "__main__":
    sys.exit(main())
