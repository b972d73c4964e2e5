"""The site's SQLite connection: get_db() for a request, kept on `g` (as in Flask's tutorial),
and get_publisher() for a registration's job.

Unlike the tutorial's, a connection is not closed after its request: each
server thread keeps one open for the next (and a RabbitMQ publisher too,
nightjar.queueing.KeptPublisher). Opening and setting up a
connection cost about a third of a page, and the last connection to close
makes SQLite checkpoint and delete its WAL file, only for the next request
to make it again. A database file replaced under the site (a new one at
the same path) is opened afresh.
"""

import os
import threading

from flask import current_app, g

from nightjar import db as nightjar_db, queueing

PUBLISHER_NAME = "Nightjar site: registrations"
_kept = threading.local()  # per server thread: .connection (path, file identity, connection), .publisher


def get_db():
    if "db" not in g:
        g.db = _thread_connection(current_app.config["NIGHTJAR"].db_path)
    return g.db


def close_db(_error=None):
    db = g.pop("db", None)
    if db is not None and db.in_transaction:
        db.rollback()  # a request that failed midway leaves nothing open for the next


def _identity(path):
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def _thread_connection(path):
    """This thread's connection to the database at path; a new one when the file changed.

    (The kept connection holds its file open, so a new file at the path never
    has the old one's inode.)
    """
    kept = getattr(_kept, "connection", None)
    if kept is not None:
        kept_path, identity, db = kept
        if kept_path == path and identity is not None and identity == _identity(path):
            return db
        db.close()
        _kept.connection = None
    db = nightjar_db.connect(path)
    _kept.connection = (path, _identity(path), db)
    return db


def get_publisher():
    """This thread's KeptPublisher for the app's settings."""
    settings = current_app.config["NIGHTJAR"]
    kept = getattr(_kept, "publisher", None)
    if kept is None or kept.settings != settings:
        if kept is not None:
            kept.close()
        kept = _kept.publisher = queueing.KeptPublisher(settings, PUBLISHER_NAME)
    return kept


def init_db(app):
    """Create the live database (schema and the seeded R-0001) if it does not exist yet."""
    nightjar_db.connect(app.config["NIGHTJAR"].db_path).close()


def init_app(app):
    app.teardown_appcontext(close_db)
