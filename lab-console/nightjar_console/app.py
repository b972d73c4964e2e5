"""The console's web server: the page, its API and the terminal's websocket (Tornado).

    GET  /                          the page (?token=TOKEN once, then the cookie)
    GET  /api/units                 the units and lessons, which passed, which is set up
    GET  /api/units/KEY/guide?lang=ja|en
    POST /api/units/KEY/setup       the unit's setup, run in the Workstation
    POST /api/units/KEY/check       the unit's check, run in the Workstation
    GET  /api/units/KEY/solution, POST /api/units/KEY/solve   a stuck learner's way out (solutions.py)
    GET  /api/files/handler.py      the Workstation's handler.py (the only file served)
    PUT  /api/files/handler.py      save it: {"text", "version"?, "force"?}
    POST /api/grade                 the grader's verdict, with the version of handler.py it judged
    WS   /terminal?rows=R&cols=C    the Workstation's shell (agent.py's protocol, relayed)
    GET  /healthz                   200 once the console serves (no token: it tells nothing)

Every request but /healthz and /static/ needs the token (access.py); API
errors are JSON {"error": "..."} with the status that fits.
"""

import asyncio
import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import tornado.web
import tornado.websocket

from . import agentlink, grading, guides, solutions
from nightjar.keyfile import read_or_create

from .access import COOKIE, Access
from .progress import Progress

HERE = Path(__file__).resolve().parent
EDITABLE = "handler.py"
FILE_LIMIT = 256 * 1024       # bytes of handler.py the editor saves
BODY_LIMIT = FILE_LIMIT * 8   # a request body, with JSON's escapes: more gets a clear 413
READ_LIMIT = 16 * 1024 * 1024  # more than this is not even read: the connection is closed
MESSAGE_LIMIT = 64 * 1024     # one websocket message from the page
log = logging.getLogger("nightjar_console")


@dataclass
class Config:
    data: Path                  # the console's own folder: token, progress
    socket: str                 # the Workstation agent's Unix socket
    workstation: Path           # the folder holding handler.py
    grader_url: str = ""        # the grading service; empty: run the grader here
    site_port: int = 8000       # where the browser finds Nightjar and the management UI
    management_port: int | None = 15672   # None: no management UI to link to (the page says why)
    solutions: bool = True      # "Show the solution" and "Solve unit N" (off for a graded course)
    origins: list = field(default_factory=list)
    hub: bool = False           # a JupyterHub single-user server (hub.py): the hub's login, no token
    management_login: tuple = ()  # under a hub: the learner's own (user, password) on the course's RabbitMQ


def language(request):
    """'ja' or 'en': the learner's switch (a cookie), else the browser's first language."""
    chosen = request.cookies.get("nightjar-console-lang")
    if chosen is not None and chosen.value in ("ja", "en"):
        return chosen.value
    first = request.headers.get("Accept-Language", "").split(",")[0].strip().lower()
    return "ja" if first.startswith("ja") else "en"


def syntax_problem(text):
    """{"line", "column", "message"} when Python would refuse handler.py, else None (compiled, never run)."""
    try:
        compile(text, EDITABLE, "exec", dont_inherit=True)
    except SyntaxError as error:
        return {"line": error.lineno, "column": error.offset, "message": error.msg}
    except (ValueError, RecursionError, MemoryError) as error:
        return {"line": None, "column": None, "message": str(error) or type(error).__name__}
    return None


def version(data):
    return hashlib.sha256(data).hexdigest()[:16]


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


class Page(Guarded):
    is_page = True

    def prepare(self):
        token = self.get_query_argument("token", None)
        if token is not None and not self.config.hub:
            if not self.access.token_matches(token):
                raise tornado.web.HTTPError(403, reason="Forbidden", log_message="a wrong token")
            # Trade the token for the cookie, and take it out of the address bar.
            self.set_cookie(COOKIE, self.access.cookie_value, httponly=True, samesite="Strict",
                            secure=self.request.headers.get("X-Forwarded-Proto") == "https"
                            or self.request.protocol == "https")
            self.redirect(self.reverse_url("page"))
            return
        super().prepare()

    def set_default_headers(self):
        super().set_default_headers()
        # Everything the page uses is the console's own; xterm.js sets styles of its own inline.
        self.set_header("Content-Security-Policy",
                        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:;"
                        " frame-ancestors 'none'; form-action 'none'; base-uri 'none'")

    def get(self):
        progress = Progress(self.config.data).read()
        self.render("console.html", lang=language(self.request), units=guides.listing(),
                    passed=progress["passed"], current=progress["current"] or "1",
                    site_port=self.config.site_port, management_port=self.config.management_port,
                    solutions=self.config.solutions,
                    base=self.reverse_url("page"), hub=self.config.hub,
                    management_login=self.config.management_login,
                    xsrf=self.xsrf_token.decode() if self.config.hub else "")

    def write_error(self, status_code, **kwargs):
        self.render("refused.html", status=status_code)


class Units(Api):
    def get(self):
        progress = Progress(self.config.data).read()
        self.finish({"units": [dict(unit, passed=unit["key"] in progress["passed"])
                               for unit in guides.listing()], "current": progress["current"]})


class Guide(Api):
    def get(self, key):
        lang = self.get_query_argument("lang", None) or language(self.request)
        if lang not in ("ja", "en"):
            self.fail(400, f"no guide in {lang!r}: ja or en")
        self.unit_folder(key)
        self.finish({"key": key, "lang": lang, "html": guides.guide_html(key, lang, self.config.management_port)})


class UnitScript(Api):
    async def post(self, key, action):
        self.unit_folder(key)
        solutions.allowed(self, key) if action == "solve" else None
        lang = self.body_json().get("lang") or language(self.request)
        if lang not in ("ja", "en"):
            self.fail(400, f"no language {lang!r}: ja or en")
        try:
            status, lines = await agentlink.run_script(self.config.socket, action, key, lang)
        except agentlink.AgentUnavailable as error:
            self.fail(503, f"Cannot {action} unit {key}: {error}")
        self.learner_acted()
        progress = Progress(self.config.data)
        if action == "check" and status == 0:
            progress.passed(key)
        if self.config.hub:
            from . import hub
            hub.after_script(self, key, action, status, lines)
        if action == "setup" and status == 0:
            progress.set_up(key)
        self.finish({"key": key, "action": action, "status": status, "done": status == 0, "lines": lines})


class Solution(solutions.ShowSolution, Api):
    """GET /api/units/KEY/solution (solutions.py)."""


class File(Api):
    def path(self, name):
        if name != EDITABLE:
            self.fail(404, f"only {EDITABLE} can be opened here, not {name!r}")
        return self.config.workstation / EDITABLE

    def get(self, name):
        path = self.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.fail(404, f"there is no {EDITABLE} in the Workstation yet: set a unit up first")
        text = data.decode("utf-8", "replace")
        self.finish({"name": name, "text": text, "version": version(data), "problem": syntax_problem(text)})

    def put(self, name):
        path = self.path(name)
        body = self.body_json()
        text = body.get("text")
        if not isinstance(text, str):
            self.fail(400, 'the body needs "text": the new handler.py')
        data = text.encode("utf-8")
        if len(data) > FILE_LIMIT:
            self.fail(413, f"{EDITABLE} may be at most {FILE_LIMIT // 1024} KiB")
        try:
            current = version(path.read_bytes())
        except FileNotFoundError:
            current = None
        if body.get("version") not in (None, current) and not body.get("force"):
            # Changed meanwhile (in the terminal, say): the learner decides, nothing is lost.
            self.set_status(409)
            self.finish({"error": f"{EDITABLE} changed in the Workstation since the editor opened it",
                         "version": current})
            return
        self.learner_acted()
        temporary = path.with_name(f".{EDITABLE}.console")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        # Saved whatever it holds: a syntax error is the learner's to see and fix, not a refusal.
        self.finish({"name": name, "saved": True, "version": version(data), "problem": syntax_problem(text)})


class Grade(Api):
    async def post(self):
        self.learner_acted()
        judged = (self.config.workstation / EDITABLE).read_bytes()  # a course's service is sent it
        sent = judged if self.config.hub else None
        try:
            verdict = await grading.grade(self.config.grader_url, sent)
        except grading.CannotGrade as error:
            self.fail(503, f"Cannot grade: {error}")
        self.finish(dict(verdict, version=version(judged)))  # the page marks it old once the file changes


class Terminal(tornado.websocket.WebSocketHandler):
    """The page's terminal: messages relayed both ways to the agent's shell."""

    log_exception = log_exception

    def initialize(self, config, access):
        self.config, self.access = config, access
        self.agent = None

    allowed, refuse = Guarded.allowed, Guarded.refuse

    def prepare(self):
        if not self.allowed():
            self.refuse()

    def check_origin(self, origin):
        return self.access.origin_allowed(self.request, origin)

    def size(self, name, default):
        given = self.get_query_argument(name, "")
        return min(max(int(given), 1), 1000) if given.isdigit() else default

    async def open(self):
        rows, cols = self.size("rows", 24), self.size("cols", 80)
        try:
            reader, self.agent = await agentlink.connect(
                self.config.socket, {"terminal": {"rows": rows, "cols": cols}})
        except agentlink.AgentUnavailable as error:
            self.write_message(json.dumps(["unavailable", f"The terminal is not ready: {error}."]))
            self.close()
            return
        asyncio.ensure_future(self._relay(reader))

    async def _relay(self, reader):
        try:
            while line := await reader.readline():
                await self.write_message(line.decode())
        except (tornado.websocket.WebSocketClosedError, OSError, ValueError):
            pass
        self.close()

    async def on_message(self, message):
        if self.agent is None or not isinstance(message, str) or len(message) > MESSAGE_LIMIT:
            return
        try:
            parsed = json.loads(message)
        except ValueError:
            return
        if isinstance(parsed, list) and parsed and parsed[0] in ("stdin", "size"):
            if parsed[0] == "stdin":
                Guarded.learner_acted(self)
            self.agent.write((json.dumps(parsed) + "\n").encode())
            await self.agent.drain()

    def on_close(self):
        if self.agent is not None:
            self.agent.close()


class Health(tornado.web.RequestHandler):
    open_to_all = True

    def get(self):
        self.finish("ok\n")


def log_request(handler):
    """Method, path and status only: a query string may hold the token."""
    status = handler.get_status()
    level = logging.INFO if status < 400 else logging.WARNING
    log.log(level, "%d %s %s", status, handler.request.method, handler.request.path)


def make_app(config, token=None):
    """The console's application: the token guards it, or, under a hub (config.hub), the hub's login."""
    access = Access(token, config.origins)
    shared = {"config": config, "access": access}
    routes = [
        (r"/", Page, shared, "page"),
        (r"/api/units", Units, shared),
        (r"/api/units/([^/]+)/guide", Guide, shared),
        (r"/api/units/([^/]+)/(setup|check|solve)", UnitScript, shared),
        (r"/api/units/([^/]+)/solution", Solution, shared),
        (r"/api/files/([^/]+)", File, shared),
        (r"/api/grade", Grade, shared),
        (r"/terminal", Terminal, shared),
        (r"/healthz", Health),
    ]
    settings = {}
    url_prefix = "/"
    if config.hub:
        from . import hub

        url_prefix = hub.prefix()
        settings["activity"] = hub.Activity()
        settings["activity"].start()
        routes = hub.login_handlers(routes + hub.course(settings, config.data, shared), url_prefix, access)
        settings["cookie_secret"] = read_or_create(config.data / "cookie-secret",
                                                   lambda: secrets.token_hex(32))
    return tornado.web.Application(
        [tornado.web.url(pattern, handler, *rest[:1], name=rest[1] if len(rest) > 1 else None)
         for pattern, handler, *rest in routes],
        template_path=str(HERE / "templates"), static_path=str(HERE / "static"),
        static_url_prefix=url_prefix + "static/",
        log_function=log_request, websocket_max_message_size=MESSAGE_LIMIT,
        websocket_ping_interval=20, xsrf_cookies=False, compress_response=True, **settings)
