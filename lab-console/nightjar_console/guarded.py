"""What every request to the console passes: the token (or the hub's login), the console's own
Origin for a change, bounded bodies, and the API's errors as JSON {"error": "..."} (access.py
holds the rules; app.py routes to the handlers built on these)."""

import json
import logging

import tornado.web

from . import guides

FILE_LIMIT = 256 * 1024       # bytes of handler.py the editor saves
BODY_LIMIT = FILE_LIMIT * 8   # a request body, with JSON's escapes: more gets a clear 413
MESSAGE_LIMIT = 64 * 1024     # one websocket message from the page
log = logging.getLogger("nightjar_console")


def language(request):
    """'ja' or 'en': the learner's switch (a cookie), else the browser's first language."""
    chosen = request.cookies.get("nightjar-console-lang")
    if chosen is not None and chosen.value in ("ja", "en"):
        return chosen.value
    first = request.headers.get("Accept-Language", "").split(",")[0].strip().lower()
    return "ja" if first.startswith("ja") else "en"


def log_exception(handler, typ, value, tb):
    """Tornado's own log line names the whole URI, whose query may hold the token: path only."""
    if isinstance(value, tornado.web.HTTPError):
        return  # an answer, logged once by log_request
    log.error("%s %s failed", handler.request.method, handler.request.path, exc_info=(typ, value, tb))


class Guarded(tornado.web.RequestHandler):
    """Needs the token; a change needs the console's own Origin too."""

    log_exception = log_exception

    def initialize(self, config, access):
        self.config, self.access = config, access

    def allowed(self):
        return self.access.allows(self.request)

    def refuse(self):
        raise tornado.web.HTTPError(403, reason="Forbidden", log_message="this needs the console's token")

    def learner_acted(self):
        """Something the learner did (not a page's poll): the hub's idle culler counts it."""
        activity = self.settings.get("activity")
        if activity is not None:
            activity.touch()

    def prepare(self):
        if not self.allowed():
            self.refuse()
            return
        origin = self.request.headers.get("Origin")
        if self.request.method not in ("GET", "HEAD") and origin is not None \
                and not self.access.origin_allowed(self.request, origin):
            raise tornado.web.HTTPError(403, reason="Forbidden", log_message="a foreign Origin")

    def set_default_headers(self):
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Referrer-Policy", "no-referrer")


class Api(Guarded):
    def prepare(self):
        super().prepare()
        length = int(self.request.headers.get("Content-Length") or 0)
        if length > BODY_LIMIT or len(self.request.body) > BODY_LIMIT:
            self.fail(413, f"the request body is over {BODY_LIMIT // 1024} KiB")

    def fail(self, status, message):
        raise tornado.web.HTTPError(status, reason=message[:80], log_message=message)

    def write_error(self, status_code, **kwargs):
        error = kwargs.get("exc_info", (None, None))[1]
        message = getattr(error, "log_message", None) or self._reason
        if status_code == 403 and not self.allowed():
            message = ("Log in to the course's hub first." if self.config.hub else
                       "This needs the lab console's token: open the URL the console printed.")
        self.finish({"error": message})

    def body_json(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            self.fail(400, "the body is not JSON")
        if not isinstance(body, dict):
            self.fail(400, "the body must be a JSON object")
        return body

    def unit_folder(self, key):
        try:
            return guides.folder_of(key)
        except guides.UnknownUnit as error:
            self.fail(404, str(error))
