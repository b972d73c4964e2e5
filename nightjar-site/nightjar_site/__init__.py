"""The Nightjar website: registration, registration status and downloadable tickets.

`create_app()` is a Flask application factory in the style of Flask's
tutorial. Run it with a production server: `python3 -m nightjar_site`.
"""

import os
import secrets
from pathlib import Path

from flask import Flask, render_template, send_file
from flask_wtf.csrf import CSRFProtect

from nightjar import history_render
from nightjar.config import Settings
from nightjar.keyfile import read_or_create
from nightjar.registrations import MAX_NAME_LENGTH

from . import database, views

csrf = CSRFProtect()

SECRET_KEY_FILE = "site-secret-key"


def create_app(test_config=None):
    """The site, configured from the environment (NIGHTJAR_*), or from test_config."""
    app = Flask(__name__)
    settings = Settings.from_env()
    app.config.from_mapping(
        NIGHTJAR=settings,
        # A guest name is short; anything much bigger is not a form post.
        MAX_CONTENT_LENGTH=16 * 1024,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        # The CSRF token is tied to the browser session and lives as long as
        # it does: a learner may leave the form open for an hour of the lab.
        WTF_CSRF_TIME_LIMIT=None,
        # How often the site queues registrations saved while RabbitMQ was down.
        REQUEUE_SECONDS=float(os.environ.get("NIGHTJAR_REQUEUE_SECONDS") or 5),
    )
    if test_config:
        app.config.update(test_config)
    if not app.config.get("SECRET_KEY"):
        app.config["SECRET_KEY"] = os.environ.get("NIGHTJAR_SECRET_KEY") or _stored_secret_key(
            app.config["NIGHTJAR"].db_path)

    csrf.init_app(app)
    database.init_app(app)
    app.register_blueprint(views.bp)
    app.jinja_env.globals["MAX_NAME_LENGTH"] = MAX_NAME_LENGTH
    app.jinja_env.globals["timeline_picture"] = history_render.picture

    @app.get("/timeline.css")
    def timeline_style():
        # The timeline picture's own stylesheet, which the course's close-up of a learner shares.
        return send_file(history_render.PICTURE_STYLE, mimetype="text/css")

    @app.errorhandler(404)
    def not_found(_error):
        return render_template("error.html", title="Page not found",
                               message="There is nothing at this address. The registration"
                               " or ticket may not exist."), 404

    @app.errorhandler(405)
    def not_allowed(_error):
        return render_template("error.html", title="Not possible here",
                               message="This page cannot be used that way."), 405

    @app.errorhandler(413)
    def too_large(_error):
        return render_template("error.html", title="Too much data",
                               message="The form sent far more than a guest name."), 413

    @app.after_request
    def security_headers(response):
        # Everything (the stylesheet included) is served by the site itself.
        response.headers.setdefault("Content-Security-Policy",
                                    "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        return response

    return app


def _stored_secret_key(db_path):
    """A random key kept (mode 0600) beside the live database, created on first use.

    Sessions (and so CSRF tokens) survive a restart of the site; the key
    never lives in the repository.
    """
    return read_or_create(Path(db_path).resolve().parent / SECRET_KEY_FILE, lambda: secrets.token_hex(32))
