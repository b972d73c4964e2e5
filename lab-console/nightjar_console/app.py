"""The console's web server (Tornado): its routes, its settings, and the page itself.

    GET  /                          the page (?token=TOKEN once, then the cookie)
    GET  /api/units                 the units and lessons, which passed, which is set up (units.py)
    GET  /api/units/KEY/guide?lang=ja|en
    POST /api/units/KEY/setup       the unit's setup, run in the Workstation
    POST /api/units/KEY/check       the unit's check, run in the Workstation
    GET  /api/units/KEY/solution, POST /api/units/KEY/solve   a stuck learner's way out (solutions.py)
    GET  /api/files/handler.py      the Workstation's handler.py (the only file served; editor.py)
    PUT  /api/files/handler.py      save it: {"text", "version"?, "force"?}
    POST /api/grade                 the grader's verdict, with the version of handler.py it judged
    WS   /terminal?rows=R&cols=C    the Workstation's shell (agent.py's protocol, relayed; terminal.py)
    GET  /healthz                   200 once the console serves (no token: it tells nothing)

Every request but /healthz and /static/ needs the token (access.py); API
errors are JSON {"error": "..."} with the status that fits (guarded.py).
"""

import logging
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import tornado.web

from . import grading, guides
from nightjar.keyfile import read_or_create

from .access import COOKIE, Access
from .editor import EDITABLE, File, version
from .guarded import MESSAGE_LIMIT, Api, Guarded, language, log
from .progress import Progress
from .terminal import Terminal
from .units import Guide, Solution, UnitScript, Units

HERE = Path(__file__).resolve().parent
READ_LIMIT = 16 * 1024 * 1024  # more than this is not even read: the connection is closed


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
