"""The class view of the course's service: every learner's row from the hub's word on their lab,
their events (course/live.py) and their last Grade; what several share; the sign-ups waiting.
course/service.py's Service is one (it holds the hub's API, the store and the events)."""

import datetime
import time

import tornado.httpclient

from . import live, signals

HUB_SECONDS = 5              # how often the service asks the hub whose lab runs


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def epoch(stamp):
    """Seconds since 1970 of the hub's ISO 8601 time (None stays None)."""
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def grade_of(at, submission):
    """A learner's last Grade as the class view shows it."""
    at = datetime.datetime.strptime(at, "%Y-%m-%d %H:%M:%S UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"time": at, "result": submission.result, "checks_passed": submission.checks_passed(),
            "failed": [{"name": check["name"], "reason": check["reason"]}
                       for check in submission.checks if not check["passed"]],
            "note": submission.note}


class ClassView:
    """Mixed into course/service.py's Service."""

    def graded(self, learner, submission):
        self.grades[learner] = grade_of(now(), submission)
        self.live.touched(learner)

    def note(self, text):
        """What Grade all does, on the instructor's page as it changes."""
        self.grade_all_note = text
        self.live.send("status", self.status())

    def status(self):
        return {"note": self.grade_all_note, "grading": self.grading_all is not None}

    async def refresh_users(self):
        """The hub's learners (whose lab runs, their last activity) and its waiting sign-ups."""
        try:
            found = {user["name"]: dict(user, hub_activity=epoch(user.get("last_activity")))
                     for user in await self.learners()}
        except (tornado.httpclient.HTTPClientError, OSError, ValueError) as error:
            print(f"Could not ask the hub for its learners: {error}", flush=True)
            return
        try:
            waiting = await self.hub("nightjar/waiting")
        except (tornado.httpclient.HTTPClientError, OSError, ValueError):
            waiting = {"waiting": [], "authorize": None}  # another login than the course's own
        before = self.users or {}
        for name, user in found.items():
            if live.lab_state(user) != live.lab_state(before.get(name, {})) or name not in before:
                self.live.touched(name)
        for name in set(before) - set(found):
            self.cached.pop(name, None)
            self.live.touched(name)
        if waiting != self.waiting:
            self.live.send("waiting", waiting)
        self.users, self.waiting = found, waiting

    def rows(self, names):
        """{name: row} of these learners (every learner when names is None), each row made anew."""
        users = self.users or {}
        everyone = names is None
        if everyone:
            names = [name for name in users if name not in self.cached or name in self.live.changed]
        people = self.lms_names() if names else {}
        passed = self.store.units_passed() if names else {}
        medians = self.live.medians() if names else {}
        moment = time.time()
        for name in names:
            if name not in users:
                self.cached.pop(name, None)
                continue
            facts = self.live.of(name).facts
            self.cached[name] = live.row(users[name], facts, self.grades.get(name), passed.get(name, []),
                                         people.get(name), signals.of(facts, medians, moment))
        if everyone:
            return dict(self.cached)
        return {name: self.cached[name] for name in names if name in self.cached}

    def lms_names(self):
        """The LMS's names of learners launched from it (their hub names are lti-<hash>)."""
        return self.lti.launches.names()[0] if self.lti is not None else {}

    async def class_view(self):
        """The API's class view: every learner, needs help first, and what several share."""
        if self.users is None:
            await self.refresh_users()
        everyone = self.rows(None)
        return {"learners": live.needs_help_first(everyone.values()), "shared": live.shared_of(everyone),
                "waiting": self.waiting, **self.status()}
