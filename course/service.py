"""The course's service on the hub: the learners' Grade on the grading farm, and the instructor's page.

    python3 -m course.service        (course/compose.yaml's `service`; the hub proxies
                                      /services/nightjar/ to it and gives it its token)

  POST grade        a learner's lab console (its server's hub token): handler.py, as the body,
                    graded on the farm; answers as grader/service.py does ({"status",
                    "stdout", "stderr"}), so the console shows it as any Grade
  POST progress     a learner's lab console: {"unit": "2"} passed its check
  GET  /            the instructor's page: every learner, the units they passed, their last
                    Grade with its failed checks; for the hub's admins and its group
                    course-staff (the hub's OAuth login)
  GET  report.html, report.csv   the class report as it stands (grader/reports/class_report.py)
  POST grade-all    every learner's current handler.py graded on the farm: a running lab's
                    file as its console serves it, else the one of the learner's last Grade;
                    in the background, the page saying so (and showing each verdict as it
                    comes) until it ends
  POST events, GET events/socket, GET live, GET api/class   each lab's events in, the live
                    class view out (course/live.py)
  GET learners/NAME, api/learners/NAME, POST api/messages, GET inbox   one learner close up, and
                    messages to learners (course/closeup.py)

Grading is the grading farm's (grader/farm/), on a broker the labs cannot reach, through one
connection for the service's life (course/grading.py); the service keeps each learner's last
Grade, as each verdict comes, and the units they passed in a SQLite file of its own
(NIGHTJAR_COURSE_SERVICE_DATA).
"""

import asyncio
import json
import os
import re
import secrets
import sqlite3
from pathlib import Path
from urllib.parse import quote

import tornado.httpclient
import tornado.ioloop
import tornado.web
from jupyterhub.services.auth import HubOAuth, HubOAuthCallbackHandler, HubOAuthenticated, UserNotAllowed
from jupyterhub.utils import url_escape_path

from grader.reports.class_report import csv_text, html_report
from grader.reports import ERROR, Submission
from nightjar import keyfile

from . import classview, closeup, live, lti
from .classview import now
from .grading import Grading
from .learners import STAFF_GROUP

HERE = Path(__file__).resolve().parent
HANDLER_LIMIT = 512 * 1024    # the farm's own limit (grader/farm/)
UNIT = re.compile(r"[a-z0-9-]{1,16}")  # "2", "cl-13-2": the units' keys (scenarios/units/table.py)


class Store:
    """Each learner's last Grade (its handler.py and the verdict) and the units they passed."""

    def __init__(self, path):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS grades (learner TEXT PRIMARY KEY, at TEXT NOT NULL,
                handler BLOB NOT NULL, submission TEXT NOT NULL);
            CREATE TABLE IF NOT EXISTS passed (learner TEXT NOT NULL, unit TEXT NOT NULL,
                at TEXT NOT NULL, PRIMARY KEY (learner, unit));""")
        self.after_graded = lambda learner, submission: None  # course/lti.py: the score to the LMS
        self.on_graded = lambda learner, submission: None     # course/live.py: the class view

    def graded(self, learner, handler, submission):
        self.db.execute("INSERT OR REPLACE INTO grades VALUES (?, ?, ?, ?)",
                        (learner, now(), handler, json.dumps(submission.as_dict())))
        self.after_graded(learner, submission)
        self.on_graded(learner, submission)

    def passed(self, learner, unit):
        self.db.execute("INSERT OR IGNORE INTO passed VALUES (?, ?, ?)", (learner, unit, now()))

    def last_grades(self):
        """{learner: (time, Submission, handler.py)} in the learners' order (verdicts are kept as
        they come, in any order)."""
        return {learner: (at, submission_of(json.loads(data), learner), handler)
                for learner, at, handler, data in self.db.execute("SELECT * FROM grades ORDER BY learner")}

    def units_passed(self):
        found = {}
        for learner, unit in self.db.execute("SELECT learner, unit FROM passed ORDER BY unit"):
            found.setdefault(learner, []).append(unit)
        return found


def submission_of(data, name):
    return Submission(name, data.get("status", ERROR), data.get("checks", []), data.get("note", ""),
                      host=data.get("host", ""))


def console_reply(submission):
    """What the lab console's Grade button reads (nightjar_console/grading.py)."""
    verdict = {"passed": submission.passed, "checks": submission.checks}
    if submission.status == ERROR:
        verdict["error"] = submission.note
    return {"status": 0 if submission.passed else (2 if submission.status == ERROR else 1),
            "stdout": json.dumps(verdict), "stderr": ""}


class Service(classview.ClassView):
    """What every handler shares: the store, and the hub's API as this service."""

    def __init__(self, store):
        self.store = store
        self.auth = HubOAuth.instance()  # the handlers' own (a singleton)
        # Each verdict is kept as soon as it comes, whoever asked for it (a Grade, Grade all).
        self.grading = Grading(os.environ["NIGHTJAR_COURSE_FARM_URL"], store.graded)
        self.grading_all = None   # the running Grade all (an asyncio task), if any
        self.grade_all_note = ""  # what the last Grade all did, for the instructor's page
        self.live = live.Live(store.path)
        self.live.view = self.rows
        self.inbox = closeup.Inbox(store.db)
        self.users = None         # the hub's learners by name, as last asked (HUB_SECONDS)
        self.waiting = {"waiting": [], "authorize": None}  # sign-ups the hub waits to authorize
        self.grades = {learner: classview.grade_of(at, submission)
                       for learner, (at, submission, _) in store.last_grades().items()}
        self.cached = {}          # name -> its row of the class view
        self.lti = None           # course/lti.py's Lti, once make_app has it
        store.on_graded = self.graded

    def start(self):
        self.grading.start()
        self.live.start()
        tornado.ioloop.PeriodicCallback(self.refresh_users, classview.HUB_SECONDS * 1000).start()

    async def hub(self, path, method="GET"):
        answer = await tornado.httpclient.AsyncHTTPClient().fetch(
            self.auth.api_url.rstrip("/") + "/" + path, method=method, request_timeout=30,
            headers={"Authorization": f"token {self.auth.api_token}"})
        return json.loads(answer.body)

    async def learners(self):
        """The hub's learners (not its admins nor course staff), each with their hub model."""
        return [user for user in await self.hub("users")
                if not user.get("admin") and STAFF_GROUP not in user.get("groups", [])]

    def start_grade_all(self):
        """Grade all in the background, unless one runs already."""
        if self.grading_all is None:
            self.note("Grade all is starting: it reads every learner's handler.py.")
            self.grading_all = asyncio.ensure_future(self.grade_all())

    async def grade_all(self):
        """Every learner's current handler.py graded on the farm as one batch: a running lab's
        file as its console serves it, else the one of the learner's last Grade."""
        try:
            grades = self.store.last_grades()
            handlers, from_last = {}, []
            for user in await self.learners():
                current = await self.handler_now(user)
                if current is None and user["name"] in grades:
                    current = grades[user["name"]][2]
                    from_last.append(user["name"])
                if current is not None:
                    handlers[user["name"]] = current
            self.note(f"Grading {len(handlers)} learners' handler.py on the farm…")
            await asyncio.gather(*(self.grading.grade(learner, handler)
                                   for learner, handler in handlers.items()))
            note = f"Graded {len(handlers)} learners' handler.py on the farm"
            if from_last:
                note += f" ({len(from_last)} whose lab is stopped: the handler.py of their last Grade)"
            note += "."
        except Exception as error:  # the hub or the farm failed it: the page says so, and why
            note = f"Grade all did not finish: {error}."
        self.grading_all = None
        self.note(note)

    async def handler_now(self, user):
        """A running lab's handler.py, as its console serves it; None when the lab does not run."""
        if not user.get("servers", {}).get("", {}).get("ready"):
            return None
        url = (os.environ["NIGHTJAR_COURSE_PROXY_URL"].rstrip("/")
               + f"/user/{url_escape_path(user['name'])}/api/files/handler.py")
        try:
            answer = await tornado.httpclient.AsyncHTTPClient().fetch(
                url, request_timeout=30, headers={"Authorization": f"token {self.auth.api_token}"})
        except (tornado.httpclient.HTTPClientError, OSError):
            return None
        return json.loads(answer.body)["text"].encode()


async def identify(handler):
    """Who the request is, asked of the hub without holding the event loop (HubOAuthenticated's
    own get_current_user waits on a thread for each request), kept where it looks first."""
    if hasattr(handler, "_hub_auth_user_cache"):
        return
    model = await handler.hub_auth.get_user(handler, sync=False)
    try:
        handler._hub_auth_user_cache = handler.check_hub_user(model) if model else None
    except UserNotAllowed:
        handler._hub_auth_user_cache = None


class LearnerApi(HubOAuthenticated, tornado.web.RequestHandler):
    """Called by a learner's console with its server's token: the learner it belongs to."""

    def initialize(self, service):
        self.service = service

    async def prepare(self):
        await identify(self)
        if self.current_user is None or self.current_user.get("kind") != "user":
            raise tornado.web.HTTPError(403)


class Grade(LearnerApi):
    async def post(self):
        handler = self.request.body
        if not handler or len(handler) > HANDLER_LIMIT:
            raise tornado.web.HTTPError(400, reason=f"send handler.py, at most {HANDLER_LIMIT} bytes")
        submission = await self.service.grading.grade(self.current_user["name"], handler)
        self.finish(console_reply(submission))


class Progress(LearnerApi):
    def post(self):
        try:
            unit = json.loads(self.request.body or b"{}").get("unit")
        except (ValueError, AttributeError):
            unit = None
        if not isinstance(unit, str) or not UNIT.fullmatch(unit):
            raise tornado.web.HTTPError(400, reason='send {"unit": KEY}, a unit\'s key')
        self.service.store.passed(self.current_user["name"], unit)
        self.finish({"recorded": unit})


class Staff(HubOAuthenticated, tornado.web.RequestHandler):
    """The instructor's pages: the hub's admins and the members of its group course-staff."""

    def initialize(self, service):
        self.service = service

    async def prepare(self):
        await identify(self)
        if self.current_user is None:
            self.redirect(self.get_login_url())
            return
        user = await self.service.hub(f"users/{quote(self.current_user['name'])}")
        if not (user.get("admin") or STAFF_GROUP in user.get("groups", [])):
            raise tornado.web.HTTPError(403, reason="for the course's instructors")

    def submissions(self):
        return [submission for _, submission, _ in self.service.store.last_grades().values()]


class StaffApi(Staff):
    """The staff's JSON API: a call with no login gets 403, not the login page."""

    async def prepare(self):
        await identify(self)
        if self.current_user is None:
            raise tornado.web.HTTPError(403, reason="for the course's instructors: their hub token")
        await super().prepare()


class Page(Staff):
    """The live class page: drawn by its script from the stream (live.Stream)."""

    async def get(self):
        self.set_header("Cache-Control", "no-store")
        self.render("instructor.html", hub=self.service.auth.hub_prefix, view=await self.service.class_view(),
                    projection=self.get_argument("projection", "") == "1")


class ClassApi(StaffApi):
    async def get(self):
        self.finish(await self.service.class_view())


class Stream(live.Stream, Staff):
    """GET live: the class view as server-sent events (course/live.py)."""


class Events(live.EventsIn, LearnerApi):
    """POST events: a lab's events (course/live.py)."""


class EventsSocket(live.EventsSocket, LearnerApi):
    """GET events/socket: a lab's events on the websocket its console keeps open (course/live.py)."""


class Inbox(closeup.InboxWait, LearnerApi):
    """GET inbox: what staff sent a learner, and their views (course/closeup.py)."""


class CloseUp(closeup.CloseUpPage, Staff):
    """GET learners/NAME (course/closeup.py)."""


class CloseUpApi(closeup.CloseUpApi, StaffApi):
    """GET api/learners/NAME."""


class Messages(closeup.Messages, StaffApi):
    """POST api/messages."""


class Report(Staff):
    def get(self, kind):
        submissions = self.submissions()
        if kind == "csv":
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.finish(csv_text(submissions))
        else:
            self.finish(html_report(submissions, "The course's last Grades"))


class GradeAll(Staff):
    """Grade all runs apart from the request: a class takes minutes on the farm, and the
    instructor's page says it runs (showing each verdict as it comes) until it has ended."""

    def post(self):
        self.service.start_grade_all()
        self.redirect(self.reverse_url("page"))


def make_app(store):
    prefix = os.environ["JUPYTERHUB_SERVICE_PREFIX"]
    service = Service(store)
    shared = {"service": service}
    service.lti = lti.start(store)
    # The farm's verdicts stored before a restart are kept at once, not at the next Grade.
    tornado.ioloop.IOLoop.current().add_callback(service.start)
    return tornado.web.Application([
        tornado.web.url(prefix, Page, shared, name="page"),
        (prefix + r"report\.(html|csv)", Report, shared),
        (prefix + "grade-all", GradeAll, shared),
        (prefix + "live", Stream, shared),
        (prefix + "api/class", ClassApi, shared),
        (prefix + "events", Events, shared),
        (prefix + "events/socket", EventsSocket, shared),
        (prefix + "inbox", Inbox, shared),
        (prefix + "learners/([^/]+)", CloseUp, shared),
        (prefix + "api/learners/([^/]+)", CloseUpApi, shared),
        (prefix + "api/messages", Messages, shared),
        (prefix + "grade", Grade, shared),
        (prefix + "progress", Progress, shared),
        (prefix + "oauth_callback", HubOAuthCallbackHandler),
        *lti.routes(prefix, Staff, shared),
    ], template_path=str(HERE / "templates"),
        # Kept: a restarted service still knows the staff's login, and their open pages go on.
        cookie_secret=keyfile.read_or_create(Path(store.path).parent / "cookie-secret", lambda: secrets.token_hex(32)),
        lti=service.lti, ui_modules={"LtiSending": lti.SendingStatus},
        # The hub's login checks XSRF itself: a cookie without the form's _xsrf logs no one in,
        # and a console's token needs none.
        xsrf_cookies=False)


def main():
    data = Path(os.environ.get("NIGHTJAR_COURSE_SERVICE_DATA") or "/srv/nightjar-service")
    data.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NIGHTJAR_LOCAL_VAR", str(data))  # the farm collector's batches
    app = make_app(Store(data / "course.sqlite"))
    app.listen(int(os.environ.get("NIGHTJAR_COURSE_SERVICE_PORT") or 9000), "0.0.0.0")
    print("The course's service is ready.", flush=True)
    tornado.ioloop.IOLoop.current().start()


if __name__ == "__main__":
    main()
