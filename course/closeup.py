"""One learner close up, and what staff send to learners: the views recorded, the messages.

    GET  learners/NAME        staff: the learner's page: handler.py now (read-only) with its
                              differences from the unit's starting file and from the last Grade,
                              their Checks and Grade, each registration's deliveries as the
                              learner's `desk.py history` tells them. Recorded as a view.
    GET  api/learners/NAME    staff: the same as JSON (recorded as a view too)
    POST api/messages         staff: {"to": ["ada"] | "all" | {"signal": KIND, "unit": U},
                              "text": "..." | {"en": "...", "ja": "..."}}: {"sent": [names]}
    GET  inbox?after=N        a learner's lab console (its token): {"items": [...], "last": N}
                              once there is something after N for that learner (or after 25 s):
                              each staff view {"id", "kind": "view", "at", "by"} and each message
                              {"id", "kind": "message", "at", "text": {lang: text}}

Staff see a learner's work only here, and each time the learner is told, in their console
("Viewed by instructor at 10:42"), as the hub's own admin access is logged.
"""

import asyncio
import datetime
import difflib
import json
import time
from types import SimpleNamespace

import tornado.web

from nightjar import history, history_render

from . import live, signals

TEXT_LIMIT = 2000          # characters of a message, in each language
WAIT_SECONDS = 25          # a console's inbox request waits this long for something new
LANGUAGES = ("en", "ja")
DELIVERY_RECORDS = 5000    # the learner's last delivery records a close-up reads


def starting_handler(unit):
    """The unit's handler.py at its start (scenarios/units/table.py), or None for another unit."""
    try:
        from scenarios.units.table import UNITS
        return UNITS[int(unit)].start_handler.read_text(encoding="utf-8")
    except (ImportError, ValueError, KeyError, OSError, TypeError):
        return None


def diff(before, after, before_name, after_name):
    if before is None or after is None:
        return None
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), before_name, after_name))


class Inbox:
    """Views and messages, per learner, in the service's database; a console waits on its own."""

    def __init__(self, db):
        self.db = db
        self.db.execute("CREATE TABLE IF NOT EXISTS inbox (id INTEGER PRIMARY KEY, learner TEXT NOT NULL,"
                        " at REAL NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL)")
        self.db.execute("CREATE INDEX IF NOT EXISTS inbox_learner ON inbox (learner, id)")
        self.waiting = {}  # learner -> [future]

    def add(self, learners, kind, data):
        at = time.time()
        with self.db:
            self.db.executemany("INSERT INTO inbox (learner, at, kind, data) VALUES (?, ?, ?, ?)",
                                [(learner, at, kind, json.dumps(data)) for learner in learners])
        for learner in learners:
            for future in self.waiting.pop(learner, []):
                if not future.done():
                    future.set_result(None)

    def after(self, learner, last):
        return [dict(json.loads(data), id=number, kind=kind, at=live.iso(at))
                for number, at, kind, data in self.db.execute(
                    "SELECT id, at, kind, data FROM inbox WHERE learner = ? AND id > ? ORDER BY id LIMIT 100",
                    (learner, last))]

    async def wait(self, learner, last):
        found = self.after(learner, last)
        if not found:
            future = asyncio.get_running_loop().create_future()
            self.waiting.setdefault(learner, []).append(future)
            try:
                await asyncio.wait_for(future, WAIT_SECONDS)
            except asyncio.TimeoutError:
                pass
            found = self.after(learner, last)
        return found


def message_text(text):
    """{lang: text} of a message (a plain string is English)."""
    if isinstance(text, str):
        text = {"en": text}
    if not isinstance(text, dict) or not text or any(
            lang not in LANGUAGES or not isinstance(words, str) or not words.strip() or len(words) > TEXT_LIMIT
            for lang, words in text.items()):
        raise tornado.web.HTTPError(400, reason=f'"text": a message of at most {TEXT_LIMIT} characters,'
                                                f' or {{"en": ..., "ja": ...}}')
    return {lang: words.strip() for lang, words in text.items()}


def recipients(to, rows):
    """The learners a message goes to; rows are the class view's rows by name."""
    if to == "all":
        return sorted(rows)
    if isinstance(to, list) and to and all(isinstance(name, str) for name in to):
        unknown = [name for name in to if name not in rows]
        if unknown:
            raise tornado.web.HTTPError(400, reason=f"no learner {unknown[0]!r} in this course")
        return sorted(set(to))
    if isinstance(to, dict) and to.get("signal") in signals.WORDS:
        return sorted(name for name, row in rows.items()
                      if any(s["kind"] == to["signal"] and (to.get("unit") is None or s["unit"] == str(to["unit"]))
                             for s in row["signals"]))
    raise tornado.web.HTTPError(400, reason='"to": ["name", ...], "all" or {"signal": KIND, "unit": U}')


def timelines(service, name, pictures):
    """Each registration's deliveries, as desk.py history tells them (nightjar/history_render.py),
    with pictures: as the site's timeline draws them too (for the page, not the API)."""
    records = []
    for (data,) in service.live.db.execute(
            "SELECT data FROM (SELECT id, data FROM events WHERE learner = ? AND data LIKE '%\"delivery\"%'"
            " ORDER BY id DESC LIMIT ?) ORDER BY id", (name, DELIVERY_RECORDS)):
        event = json.loads(data)
        if event["kind"] != "delivery":
            continue
        record = {key: value for key, value in event.items() if key not in ("kind", "registration")}
        records.append(dict(record, id=event["registration"], after=0))
    stored = history.parse("\n".join(json.dumps(record) for record in records))
    found = []
    for registration, deliveries in sorted(stored.deliveries.items()):
        numbers = [n for d in deliveries for step in d.steps for n in step.get("committed") or []]
        tickets = [SimpleNamespace(number=n) for n in dict.fromkeys(numbers)]
        shown = SimpleNamespace(id=registration, tickets=tickets)
        story = history_render.story(shown, stored)
        found.append({"registration": registration, "tickets": [t.number for t in tickets],
                      "deliveries": story.deliveries, "lines": story.lines()})
        if pictures:
            found[-1]["picture"] = history_render.picture(story, registration)
    return found


async def close_up(service, name, pictures=False):
    """One learner close up, as the API and (with the timelines' pictures) the page show it."""
    view = await service.class_view()
    rows = {row["name"]: row for row in view["learners"]}
    if name not in rows:
        raise tornado.web.HTTPError(404, reason=f"no learner {name!r} in this course")
    row = rows[name]
    user = (service.users or {}).get(name, {})
    now = await service.handler_now(user) if user else None
    grades = service.store.last_grades()
    graded = grades[name][2].decode("utf-8", "replace") if name in grades else None
    text = now.decode("utf-8", "replace") if now is not None else None
    start = starting_handler(row["unit"]) if row["unit"] else None
    facts = service.live.of(name).facts
    return dict(row, handler={"text": text if text is not None else graded,
                              "from": "lab" if text is not None else ("last grade" if graded is not None else None)},
                diff_from_start=diff(start, text if text is not None else graded,
                                     f"unit {row['unit']}'s handler.py", "handler.py now"),
                diff_from_grade=diff(graded, text, "handler.py of the last Grade", "handler.py now") if text else None,
                checks=[dict(check, time=live.iso(check["time"])) for check in reversed(facts["checks"])],
                registrations=timelines(service, name, pictures))


def record_view(service, handler, name):
    service.inbox.add([name], "view", {"by": handler.current_user["name"]})


class CloseUpPage(tornado.web.RequestHandler):
    """Mixed after service.py's Staff."""

    async def get(self, name):
        found = await close_up(self.service, name, pictures=True)
        record_view(self.service, self, name)
        self.set_header("Cache-Control", "no-store")
        self.render("learner.html", learner=found, hub=self.service.auth.hub_prefix,
                    timeline_style=history_render.PICTURE_STYLE.read_text(encoding="utf-8"))


class CloseUpApi(tornado.web.RequestHandler):
    async def get(self, name):
        found = await close_up(self.service, name)
        record_view(self.service, self, name)
        self.finish(found)


class Messages(tornado.web.RequestHandler):
    async def post(self):
        try:
            body = json.loads(self.request.body)
            to, text = body["to"], body["text"]
        except (ValueError, KeyError, TypeError):
            raise tornado.web.HTTPError(400, reason='send {"to": ..., "text": ...}') from None
        text = message_text(text)
        rows = {row["name"]: row for row in (await self.service.class_view())["learners"]}
        sent = recipients(to, rows)
        self.service.inbox.add(sent, "message", {"text": text, "by": self.current_user["name"]})
        self.finish({"sent": sent})


class InboxWait(tornado.web.RequestHandler):
    """Mixed after service.py's LearnerApi."""

    async def get(self):
        try:
            last = int(self.get_argument("after", "0"))
        except ValueError:
            raise tornado.web.HTTPError(400, reason="after=N, the last item's id") from None
        found = await self.service.inbox.wait(self.current_user["name"], last)
        self.finish({"items": found, "last": found[-1]["id"] if found else last})


def shown_time(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%SZ").strftime("%H:%M UTC") if iso else ""
