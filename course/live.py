"""The class as it happens: each lab's events in, the class view out to staff, pushed.

    POST events         a learner's lab (its server's hub token): {"events": [EVENT, ...]},
                        at most EVENTS_PER_POST events and BODY_LIMIT bytes; the learner is the
                        token's, never the body's. 200 {"kept": N} once they are in the database;
                        400 malformed, 413 too large, 429 (Retry-After) a lab that floods.
    GET  events/socket  the same as a websocket, which a lab's console keeps open: each message
                        a post's body, each answer {"kept": N} or {"status": 400 | 413 | 429,
                        "reason": ...}, in order. One connection and one login a lab, not one
                        a second: a tornado request costs more CPU than a websocket message.
                        A browser's (any Origin) is refused: a page cannot send as its learner.
    GET  live           staff: server-sent events. `class` (the whole view) first, then `rows`
                        (the learners that changed, at most every PUSH_SECONDS) and `status`
                        (Grade all's note).
    GET  api/class      staff: the class view as JSON (docs/reference/http-apis.md)

An EVENT, as the lab's console sends it (lab-console/nightjar_console/course_events.py):

    {"kind": "setup", "time": T, "unit": "2"}
    {"kind": "check", "time": T, "unit": "2", "passed": false, "missing": "missing: ..."}
    {"kind": "active", "time": T}
    {"kind": "delivery", "time": T, "event": "received" | "raised" | "ack" | ...,
     "registration": "R-0002", "delivery": TOKEN, "redelivered": bool, "committed": [5],
     "point": "before-write", "type": "ValueError", "message": "..."}   (a delivery history record)

Events are kept in the service's SQLite file (table events), written in batches off the event
loop; on a start the state is rebuilt from them, so a restart loses nothing. Staff are told of a
change at most PUSH_SECONDS after the event arrived.
"""

import asyncio
import datetime
import json
import re
import sqlite3
import time

import tornado.ioloop
import tornado.iostream
import tornado.web
import tornado.websocket

from . import signals

BODY_LIMIT = 64 * 1024
EVENTS_PER_POST = 200
TEXT_LIMIT = 300           # characters of a string field
RATE_POSTS = 5             # a lab's posts a second, on average...
RATE_BURST = 30            # ...and at once (a lab sending what it buffered)
PUSH_SECONDS = 0.25        # changes reach staff in batches this often
WRITE_SECONDS = 0.1        # posts are written together, this often at most (each answered once written)
SIGNALS_EVERY = 10         # time alone changes signals (idle): looked at again this often
KEEP_DELIVERIES = 200      # deliveries kept in memory per learner
KEEP_CHECKS = 50
KINDS = {"setup", "check", "active", "delivery"}
UNIT = re.compile(r"[a-z0-9-]{1,16}")
REGISTRATION = re.compile(r"R-[0-9]{4,9}")
TOKEN = re.compile(r"[A-Za-z0-9_-]{1,64}")
EVENT_NAME = re.compile(r"[a-z-]{1,32}")
# How a delivery ended (nightjar/history.py and nightjar/events.py); an ending by an exception,
# the learner's Ctrl+C or a lost connection outweighs a settlement seen before it.
STOPPED = {"raised", "interrupted", "connection-lost"}
SETTLED = {"ack", "nack", "reject", "no-ack"}


class Malformed(ValueError):
    pass


def checked(event, received):
    """The event as kept: only known fields, each checked (Malformed says what is wrong)."""
    if not isinstance(event, dict) or event.get("kind") not in KINDS:
        raise Malformed(f"an event is an object whose kind is one of {', '.join(sorted(KINDS))}")
    when = event.get("time")
    if not isinstance(when, (int, float)) or isinstance(when, bool):
        raise Malformed("an event's time is seconds since 1970")
    kept = {"kind": event["kind"], "time": min(float(when), received)}  # never in the future
    rules = {"unit": UNIT, "registration": REGISTRATION, "delivery": TOKEN, "event": EVENT_NAME,
             "point": EVENT_NAME}
    for name, pattern in rules.items():
        if name in event:
            if not isinstance(event[name], str) or not pattern.fullmatch(event[name]):
                raise Malformed(f"an event's {name} is not one")
            kept[name] = event[name]
    for name in ("passed", "redelivered"):
        if name in event:
            kept[name] = bool(event[name])
    for name in ("missing", "type", "message"):
        if isinstance(event.get(name), str):
            kept[name] = event[name][:TEXT_LIMIT]
    committed = event.get("committed")
    if committed is not None:
        if not (isinstance(committed, list) and len(committed) <= 100
                and all(isinstance(n, int) and not isinstance(n, bool) for n in committed)):
            raise Malformed("an event's committed is a list of ticket numbers")
        kept["committed"] = committed
    needed = {"setup": ("unit",), "check": ("unit", "passed"), "delivery": ("event", "registration", "delivery")}
    for name in needed.get(kept["kind"], ()):
        if name not in kept:
            raise Malformed(f"a {kept['kind']} event needs its {name}")
    return kept


def parse(body, received):
    """The checked events of a POST's body."""
    if len(body) > BODY_LIMIT:
        raise tornado.web.HTTPError(413, reason=f"at most {BODY_LIMIT} bytes of events a post")
    try:
        events = json.loads(body)["events"]
    except (ValueError, KeyError, TypeError):
        raise tornado.web.HTTPError(400, reason='send {"events": [...]}') from None
    if not isinstance(events, list):
        raise tornado.web.HTTPError(400, reason='send {"events": [...]}')
    if len(events) > EVENTS_PER_POST:
        raise tornado.web.HTTPError(413, reason=f"at most {EVENTS_PER_POST} events a post")
    try:
        return [checked(event, received) for event in events]
    except Malformed as error:
        raise tornado.web.HTTPError(400, reason=str(error)) from None


class Bucket:
    """A lab's allowance of posts: RATE_POSTS a second, RATE_BURST at once."""

    def __init__(self):
        self.tokens, self.at = RATE_BURST, time.monotonic()

    def take(self):
        now = time.monotonic()
        self.tokens = min(RATE_BURST, self.tokens + (now - self.at) * RATE_POSTS)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


def iso(seconds):
    if seconds is None:
        return None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Learner:
    """One learner's state, from their events (signals.py reads it as plain data)."""

    def __init__(self):
        self.facts = {"unit": None, "unit_since": None, "passed": [], "last_activity": None,
                      "checks": [], "deliveries": [], "unit_times": {}}
        self.tokens = {}  # delivery token -> its delivery dict

    def apply(self, event):
        facts, when = self.facts, event["time"]
        facts["last_activity"] = max(facts["last_activity"] or 0, when)
        kind = event["kind"]
        if kind == "setup":
            facts["unit"], facts["unit_since"] = event["unit"], when
        elif kind == "check":
            facts["checks"] = (facts["checks"] + [{"time": when, "unit": event["unit"], "passed": event["passed"],
                                                    "missing": event.get("missing")}])[-KEEP_CHECKS:]
            if event["passed"] and event["unit"] not in facts["passed"]:
                facts["passed"].append(event["unit"])
                if facts["unit"] == event["unit"] and facts["unit_since"] is not None:
                    facts["unit_times"][event["unit"]] = when - facts["unit_since"]
        elif kind == "delivery":
            self.delivery(event)

    def delivery(self, event):
        deliveries, token = self.facts["deliveries"], event["delivery"]
        if event["event"] == "received":
            before = [d for d in deliveries if d["registration"] == event["registration"]]
            found = {"registration": event["registration"], "token": token, "time": event["time"],
                     "redelivered": event.get("redelivered", False), "unit": self.facts["unit"],
                     "ending": None, "committed": [],
                     "after_interrupt": bool(before) and before[-1]["ending"] == "interrupted"}
            deliveries.append(found)
            self.tokens[token] = found
            if len(deliveries) > KEEP_DELIVERIES:
                self.tokens.pop(deliveries.pop(0)["token"], None)
            return
        found = self.tokens.get(token)
        if found is None:
            return  # its `received` was trimmed from the lab's history before it was sent
        for number in event.get("committed", []):
            if number not in found["committed"]:
                found["committed"].append(number)
        if event["event"] in STOPPED or (event["event"] in SETTLED and found["ending"] is None):
            found["ending"] = event["event"]
        if event["event"] == "raised":
            found["error"] = f"{event.get('type', '')}: {event.get('message', '')}".strip(": ")


class Live:
    """Every learner's events, kept and applied; the class view, pushed to staff."""

    def __init__(self, path):
        self.path = path
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY,"
                        " learner TEXT NOT NULL, data TEXT NOT NULL)")
        self.learners = {}
        self.buckets = {}
        self.pending = []          # (learner, data) not written yet
        self.written = None        # a future: the next batch written
        self.listeners = set()     # asyncio.Queue per staff stream
        self.changed = set()
        self.view = lambda names: {}   # service.py's: {name: row} of these learners (all when None)
        self.shared_now = []
        for learner, data in self.db.execute("SELECT learner, data FROM events ORDER BY id"):
            self.of(learner).apply(json.loads(data))

    def of(self, name):
        if name not in self.learners:
            self.learners[name] = Learner()
        return self.learners[name]

    def start(self):
        tornado.ioloop.PeriodicCallback(self.push, PUSH_SECONDS * 1000).start()
        tornado.ioloop.PeriodicCallback(self.look_again, SIGNALS_EVERY * 1000).start()

    # ---- events in -----------------------------------------------------------------------------
    def allowed(self, learner):
        return self.buckets.setdefault(learner, Bucket()).take()

    async def receive(self, learner, body):
        """A lab's events, as a post's body: {"kept": N} once written, else the HTTPError that
        says why not (429, 413, 400)."""
        if not self.allowed(learner):
            raise tornado.web.HTTPError(429, reason="too many posts of events: send them together")
        events = parse(body, time.time())
        await self.take(learner, events)
        return {"kept": len(events)}

    async def take(self, learner, events):
        """Keep the events (answered once written), apply them, and mark the learner changed."""
        self.pending += [(learner, json.dumps(event)) for event in events]
        for event in events:
            self.of(learner).apply(event)
        self.touched(learner)
        if self.written is None:
            self.written = asyncio.ensure_future(self.write())
        await asyncio.shield(self.written)

    async def write(self):
        """One transaction for everything that came meanwhile, in a thread: the loop goes on."""
        await asyncio.sleep(WRITE_SECONDS)  # one transaction for the posts of the same moment
        batch, self.pending = self.pending, []
        self.written = None
        await asyncio.to_thread(self._write, batch)

    def _write(self, batch):
        with self.db:
            self.db.executemany("INSERT INTO events (learner, data) VALUES (?, ?)", batch)

    # ---- the view out --------------------------------------------------------------------------
    def touched(self, learner):
        self.changed.add(learner)

    def signals_of(self, name, medians, now):
        return signals.of(self.of(name).facts, medians, now)

    def medians(self):
        return signals.medians(learner.facts for learner in self.learners.values())

    def listen(self):
        queue = asyncio.Queue()
        self.listeners.add(queue)
        return queue

    def unlisten(self, queue):
        self.listeners.discard(queue)

    def send(self, kind, data):
        message = f"event: {kind}\ndata: {json.dumps(data)}\n\n"
        for queue in self.listeners:
            queue.put_nowait(message)

    def push(self):
        # With no staff watching, the changes wait: the next page's view makes those rows anew.
        if not self.changed or not self.listeners:
            return
        names, self.changed = self.changed, set()
        rows = self.view(names)
        everyone = self.view(None)
        self.shared_now = shared_of(everyone)
        self.send("rows", {"rows": list(rows.values()), "shared": self.shared_now})

    def look_again(self):
        """Signals that time alone changed (idle) reach the page too."""
        if self.listeners:
            self.changed.update(self.learners)


def shared_of(rows):
    return signals.shared({row["name"]: row["signals"] for row in rows.values()})


class EventsIn(tornado.web.RequestHandler):
    """Mixed after service.py's LearnerApi: a lab's events, its learner the token's."""

    async def post(self):
        try:
            answer = await self.service.live.receive(self.current_user["name"], self.request.body)
        except tornado.web.HTTPError as error:
            if error.status_code == 429:
                self.set_header("Retry-After", "1")
            raise
        self.finish(answer)


class EventsSocket(tornado.websocket.WebSocketHandler):
    """Mixed after service.py's LearnerApi: GET events/socket, a lab's posts as messages."""

    max_message_size = 2 * BODY_LIMIT  # up to it, a 413 answer; above it, tornado closes (1009)

    def check_origin(self, origin):
        return False  # a lab's console sends no Origin; a browser always does

    async def on_message(self, body):
        # One answer a message, in order: the next message waits for this one's.
        if isinstance(body, str):
            body = body.encode()
        try:
            answer = await self.service.live.receive(self.current_user["name"], body)
        except tornado.web.HTTPError as error:
            answer = {"status": error.status_code, "reason": error.reason}
        try:
            await self.write_message(answer)  # a dict goes as JSON
        except tornado.websocket.WebSocketClosedError:
            pass


class Stream(tornado.web.RequestHandler):
    """Mixed after service.py's Staff: the class view as server-sent events."""

    KEEP_ALIVE = 10  # a ping this often: the page knows a stream the hub's proxy left hanging

    async def get(self):
        live = self.service.live
        self.set_header("Content-Type", "text/event-stream; charset=utf-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Accel-Buffering", "no")
        queue = live.listen()
        try:
            everyone = await self.service.class_view()
            self.write(f"event: class\ndata: {json.dumps(everyone)}\n\n")
            await self.flush()
            while True:
                try:
                    message = await asyncio.wait_for(queue.get(), self.KEEP_ALIVE)
                except asyncio.TimeoutError:
                    message = "event: ping\ndata: {}\n\n"
                self.write(message)
                await self.flush()
        except tornado.iostream.StreamClosedError:
            pass
        finally:
            live.unlisten(queue)

    def on_connection_close(self):
        pass


def lab_state(user):
    """running, starting, stopping or stopped: the hub's word on the learner's server."""
    server = (user.get("servers") or {}).get("")
    if not server:
        return "stopped"
    if server.get("ready"):
        return "running"
    return "stopping" if server.get("stopped") or server.get("pending") == "stop" else "starting"


def row(user, facts, grade, passed, display, found):
    """One learner's row of the class view (the API's `learners` item)."""
    checks = facts["checks"]
    last_check = checks[-1] if checks else None
    activity = [t for t in (facts["last_activity"], user.get("hub_activity")) if t]
    return {
        "name": user["name"], "display": display or None, "lab": lab_state(user),
        "unit": facts["unit"], "unit_since": iso(facts["unit_since"]),
        "last_check": last_check and {"time": iso(last_check["time"]), "unit": last_check["unit"],
                                      "passed": last_check["passed"], "missing": last_check.get("missing")},
        "passed": sorted(set(passed) | set(facts["passed"])),
        "last_grade": grade,
        "last_activity": iso(max(activity)) if activity else None,
        "signals": [dict(s, since=iso(s["since"])) for s in found],
    }


def needs_help_first(rows):
    """Most signals, the most urgent and oldest first; then the learners who are fine, by name."""
    def key(row):
        found = row["signals"]
        if not found:
            return (1, 0, "", row["name"])
        return (0, -len(found), min(s["since"] for s in found), row["name"])
    return sorted(rows, key=key)
