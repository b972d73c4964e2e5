"""The console as a JupyterHub single-user server: the hub's login in place of the token.

A course's hub (course/) starts each learner's lab with the JUPYTERHUB_*
variables every single-user server gets. The console then serves under the
server's prefix (/user/NAME/), and every page, API call and the terminal's
websocket need the hub's OAuth login of a user the hub lets use this server
(its owner, or an admin the hub grants access:servers); the Origin rule stays
as it is. There is no console token.

The hub's idle culler reads the server's last activity. The hub itself would
take it from the proxy, where an open tab's websocket pings count (the course
turns that off: JupyterHub.last_activity_interval = 0), so the console reports
what the learner does (typing, saving, Set up, Check, Grade) and nothing else.
"""

import asyncio
import datetime
import importlib.util
import json
import logging
import os
import re
import sys
import time

import tornado.httpclient
import tornado.ioloop
import tornado.web


def import_when_used(name):
    """Put module `name` in sys.modules, to be run only when something first uses it
    (importlib.util.LazyLoader): whatever uses it gets it whole, only later."""
    spec = importlib.util.find_spec(name)
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    package, _, attribute = name.rpartition(".")
    setattr(sys.modules[package], attribute, module)


# jupyterhub.services.auth imports the hub's own database layer (jupyterhub.orm: SQLAlchemy's
# ORM, alembic), which a single-user server never uses: imported, it was a lab's largest cost,
# about 18 MiB and 0.3 CPU-seconds of every lab's start.
import_when_used("jupyterhub.orm")
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated  # noqa: E402

log = logging.getLogger("nightjar_console")
# Seconds: the hub hears of a learner's work at most this often (a course's idle limit is far longer).
ACTIVITY_EVERY = int(os.environ.get("NIGHTJAR_CONSOLE_ACTIVITY_SECONDS") or 30)


def prefix(environ=None):
    """The server's URL prefix under the hub, e.g. /user/alice/ (always ending in /)."""
    env = os.environ if environ is None else environ
    return "/" + env["JUPYTERHUB_SERVICE_PREFIX"].strip("/") + "/"


class HubLogin(HubOAuthenticated):
    """Mixed into each console handler: the hub's login decides who may use the console."""

    def allowed(self):
        return self.current_user is not None

    def refuse(self):
        # A page asks the hub to log the learner in; anything else is refused.
        if self.request.method == "GET" and getattr(self, "is_page", False) and not self.current_user:
            self.redirect(self.get_login_url())
            return
        raise tornado.web.HTTPError(403, reason="Forbidden", log_message="not this server's user")


def login_handlers(handlers, server_prefix, origins):
    """The console's routes (pattern, handler, ...) under the prefix, each needing the hub's
    login; the site and the management UI relayed; the OAuth callback the hub sends the
    learner back to. `origins` is the console's Access (its Origin rule)."""
    routed = []
    server_prefix = re.escape(server_prefix)  # a hub name may hold '.', '+' or '%C3%AB'
    for pattern, handler, *kwargs in handlers:
        if getattr(handler, "open_to_all", False):
            hub_handler = handler
        else:
            hub_handler = type(handler.__name__, (HubLogin, handler), {})
        routed.append((server_prefix + pattern.lstrip("/"), hub_handler, *kwargs))
    for path, relay in (("site/.*", SiteRelay), ("rabbitmq/(.*)", ManagementRelay)):
        # The relay's own XSRF rule, not the hub's (which HubLogin would bring first).
        hub_relay = type(relay.__name__, (HubLogin, relay), {"check_xsrf_cookie": relay.check_xsrf_cookie})
        routed.append((server_prefix + path, hub_relay, {"origins": origins}))
    routed.append((server_prefix + "oauth_callback", HubOAuthCallbackHandler))
    return routed


class Relay(tornado.web.RequestHandler):
    """A page of the learner's lab that has no port on any host, relayed behind the hub's login.

    The hub's XSRF token belongs to the console's own page: the site's form (which has
    its own) and the management UI (which logs in on its own) are checked by Origin instead.
    """

    SUPPORTED_METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE")
    is_page = True
    SENT_ON = ("Accept", "Accept-Language", "Authorization", "Content-Type", "Cookie",
               "If-None-Match", "Referer", "Origin")
    PASSED_BACK = ("Content-Type", "Location", "Set-Cookie", "Cache-Control", "ETag", "Refresh",
                   "Content-Disposition", "Content-Security-Policy", "X-Content-Type-Options")

    def initialize(self, origins):
        self.origins = origins

    def check_xsrf_cookie(self):
        origin = self.request.headers.get("Origin")
        if origin is None or not self.origins.origin_allowed(self.request, origin):
            raise tornado.web.HTTPError(403, "a change from another Origin")

    def prepare(self):
        if not self.allowed():
            self.refuse()

    def upstream(self, *path):
        raise NotImplementedError

    async def get(self, *path):
        headers = {name: self.request.headers[name] for name in self.SENT_ON if name in self.request.headers}
        answer = await tornado.httpclient.AsyncHTTPClient().fetch(
            self.upstream(*path), method=self.request.method, headers=headers,
            body=self.request.body if self.request.method in ("POST", "PUT") else None,
            allow_nonstandard_methods=True, follow_redirects=False, raise_error=False,
            request_timeout=30)
        if answer.code == 599:  # no answer at all
            raise tornado.web.HTTPError(502, reason=f"{self.what} is not answering")
        self.set_status(answer.code, answer.reason)
        self.clear_header("Content-Type")
        for name, value in answer.headers.get_all():
            if name in self.PASSED_BACK:
                self.add_header(name, value)
        self.finish(answer.body)

    head = post = put = delete = get


class SiteRelay(Relay):
    """The learner's Nightjar site, run in the lab's container under PREFIX/site
    (NIGHTJAR_SITE_PREFIX), on its loopback only."""

    what = "The Nightjar site"

    def upstream(self):
        return f"http://127.0.0.1:{int(os.environ.get('NIGHTJAR_SITE_PORT') or 8000)}{self.request.uri}"


class ManagementRelay(Relay):
    """The course RabbitMQ's management UI, where the learner's login sees their own vhost only."""

    what = "RabbitMQ's management UI"

    def upstream(self, path):
        query = f"?{self.request.query}" if self.request.query else ""
        return os.environ["NIGHTJAR_MANAGEMENT_URL"].rstrip("/") + "/" + path + query


class Activity:
    """What the learner did lately, told to the hub (JUPYTERHUB_ACTIVITY_URL) now and then."""

    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        self.url = env.get("JUPYTERHUB_ACTIVITY_URL", "")
        self.server = env.get("JUPYTERHUB_SERVER_NAME", "")
        self.token = env.get("JUPYTERHUB_API_TOKEN", "")
        self.last_done = None   # monotonic time of the learner's last action
        self.reported = None
        self.on_report = lambda: None  # course_events.py: the class page hears of it too

    def touch(self):
        self.last_done = time.monotonic()

    def start(self):
        if self.url:
            tornado.ioloop.PeriodicCallback(self.report, ACTIVITY_EVERY * 1000).start()

    async def report(self):
        if self.last_done is None or self.last_done == self.reported:
            return
        self.on_report()
        when = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(
            seconds=time.monotonic() - self.last_done)
        stamp = when.isoformat().replace("+00:00", "Z")
        body = {"servers": {self.server: {"last_activity": stamp}}, "last_activity": stamp}
        try:
            await tornado.httpclient.AsyncHTTPClient().fetch(
                self.url, method="POST", body=json.dumps(body), request_timeout=10,
                headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"})
            self.reported = self.last_done
        except (tornado.httpclient.HTTPClientError, OSError) as error:
            log.warning("could not tell the hub of the learner's activity: %s", error)


def course(settings, folder, shared):
    """The lab's events to the course's service, the learner's activity among them, and what the
    course's staff send back (course_events.py); the routes of the page's view of it."""
    from . import course_events

    events, inbox = course_events.from_environment(folder)
    if events is None:
        return []
    settings["activity"].on_report = lambda: events.add("active")
    settings["course_events"], settings["course_inbox"] = events, inbox
    events.start()
    inbox.start()
    return course_events.routes(shared)


def after_script(handler, key, action, status, lines):
    """A unit's setup or Check has run: the course's service hears of it."""
    if action == "check" and status == 0:
        asyncio.ensure_future(tell_passed(handler.config.grader_url, key))
    events = handler.settings.get("course_events")
    if events is not None:
        events.unit_script(key, action, status, lines)


async def tell_passed(service_url, unit):
    """The course's service keeps which units each learner passed, for the instructor's page."""
    try:
        await tornado.httpclient.AsyncHTTPClient().fetch(
            service_url.rstrip("/") + "/progress", method="POST", body=json.dumps({"unit": unit}),
            request_timeout=30, headers={"Authorization": f"token {os.environ['JUPYTERHUB_API_TOKEN']}"})
    except (tornado.httpclient.HTTPClientError, OSError) as error:
        log.warning("could not tell the course that unit %s passed: %s", unit, error)
