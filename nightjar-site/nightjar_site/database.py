"""One SQLite connection per request, kept on `g` (as in Flask's tutorial)."""

from flask import current_app, g

from nightjar import db as nightjar_db


def get_db():
    if "db" not in g:
        g.db = nightjar_db.connect(current_app.config["NIGHTJAR"].db_path)
    return g.db


def close_db(_error=None):
    db = g.pop("db", None)
    if db is not None:
        db.close()


def init_db(app):
    """Create the live database (schema and the seeded R-0001) if it does not exist yet."""
    nightjar_db.connect(app.config["NIGHTJAR"].db_path).close()


def init_app(app):
    app.teardown_appcontext(close_db)
