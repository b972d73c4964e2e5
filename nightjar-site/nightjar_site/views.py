"""The pages of the Nightjar site."""

import functools
import os
import re

from flask import (Blueprint, Response, abort, current_app, redirect, render_template, request,
                   url_for)
from flask_wtf.csrf import CSRFError

from nightjar import history, history_render, queueing, registrations

from .database import get_db, get_publisher

bp = Blueprint("site", __name__)


@bp.get("/")
def home():
    return render_template("home.html")


@bp.get("/explore")
def explore():
    return render_template("explore.html")


@bp.get("/visit")
def visit():
    return render_template("visit.html")


@bp.get("/evening")
def evening():
    return render_template("evening.html")


@bp.post("/evening")
def register():
    raw_name = request.form.get("name", "")
    try:
        # Saves the registration first, then queues it with a publisher
        # confirm; when RabbitMQ is down the registration is kept as waiting.
        registration_id, _queued = queueing.register(
            get_db(), current_app.config["NIGHTJAR"], raw_name, kept=get_publisher())
    except registrations.InvalidName as reason:
        return render_template("evening.html", error=str(reason), name=raw_name), 400
    # POST/redirect/GET: reloading the registration page never registers twice.
    return redirect(url_for("site.registration", registration_id=registration_id), code=303)


@bp.app_errorhandler(CSRFError)
def csrf_failed(_error):
    message = ("This form has expired or did not come from this site, so nothing was saved."
               " Please register again.")
    return render_template("evening.html", error=message,
                           name=request.form.get("name", "")), 400


@bp.get("/registrations")
def registration_list():
    return render_template("registrations.html",
                           registrations=registrations.all_registrations(get_db()))


@bp.get("/registrations/<registration_id>")
def registration(registration_id):
    found = registrations.get(get_db(), registration_id)
    if found is None:
        abort(404)
    return render_template("registration.html", registration=found, story=delivery_story(found))


def delivery_story(found):
    """The registration's history_render.Story, or None when the history is off or cannot be read now."""
    path = history.store_path(current_app.config["NIGHTJAR"].db_path)
    if path is None:
        return None
    try:
        stat = os.stat(path)
        version = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    except FileNotFoundError:
        version = None
    try:
        return history_render.story(found, _history_of(path, found.id, version))
    except OSError:
        return None  # the page works without it; the template says the history cannot be read


@functools.lru_cache(maxsize=256)
def _history_of(path, registration_id, version):
    """history.read, read again only when the file changed (version: its identity, size and
    time; every record the worker adds grows it): a page the guest keeps refreshing, or many
    guests' pages, do not parse the whole file each time."""
    return history.read(path, registration_id)


def _ticket_or_404(number):
    db = get_db()
    ticket = registrations.get_ticket(db, number)
    if ticket is None:
        abort(404)
    owner = registrations.get(db, ticket.registration_id)
    siblings = [t.number for t in owner.tickets] if owner else [ticket.number]
    return ticket, owner, siblings


@bp.get("/tickets/<int:number>")
def ticket(number):
    ticket, owner, siblings = _ticket_or_404(number)
    return render_template("ticket.html", ticket=ticket, registration=owner, siblings=siblings)


@bp.get("/tickets/<int:number>/download")
def download(number):
    ticket, _owner, _siblings = _ticket_or_404(number)
    text = render_template("ticket.txt", ticket=ticket) + "\n"
    safe_id = re.sub(r"[^A-Za-z0-9-]", "", ticket.registration_id) or "ticket"
    return Response(text, mimetype="text/plain", headers={
        "Content-Disposition": f'attachment; filename="nightjar-{safe_id}-ticket-{ticket.number}.txt"',
    })


@bp.get("/healthz")
def healthz():
    try:
        get_db().execute("SELECT COUNT(*) FROM registrations").fetchone()
    except Exception as error:  # the container health check only needs a yes or no
        return Response(f"database unavailable: {type(error).__name__}\n", status=503,
                        mimetype="text/plain")
    return Response("ok\n", mimetype="text/plain")
