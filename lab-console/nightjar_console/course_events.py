"""A course's lab tells the course's service what happens in it, for the instructor's class page.

Under a course's hub (hub.py), the console sends the lab's events to the service on a
websocket it keeps open (course/live.py: events/socket; opened again after a loss), with its
own server's hub token: each unit set up, each Check and what it still missed, the learner's
activity, and every record of the lab's delivery history (nightjar/history.py: each delivery,
redelivery, crash, ack and ticket committed), read as the worker appends it. Nothing in the
Workstation changes for it.

What is not accepted yet waits in an outbox file in the console's folder, so a service or a
hub that is down, or a console that restarts, loses nothing: it is sent once the service
answers again (a 429 or a 5xx, later; a 400 or 413 is dropped, with a line in the log).
"""

import asyncio
import json
import logging
import os
import re
import time
from pathlib import Path

import tornado.httpclient
import tornado.ioloop
import tornado.websocket

from nightjar import history

log = logging.getLogger("nightjar_console")
SEND_EVERY = 1.0             # seconds between two looks at the history and two posts
PER_POST = 200               # events a post (the service's EVENTS_PER_POST)
OUTBOX_LIMIT = 20000         # events kept while the service cannot be reached; the oldest go first
REGISTRATION = re.compile(r"R-[0-9]{4,9}")
# The history record's fields the service keeps (course/live.py's checked()).
FIELDS = ("redelivered", "point", "committed", "type", "message")


class CourseEvents:
    def __init__(self, service_url, token, folder, history_path):
        # ws:// or wss://, as the service's http:// or https://
        self.url = "ws" + service_url.rstrip("/").removeprefix("http") + "/events/socket"
        self.socket = None
        self.token = token
        self.outbox = Path(folder) / "course-events.jsonl"
        self.state_path = Path(folder) / "course-events.state"
        self.history_path = history_path
        self.pending = self.read_outbox()
        self.state = self.read_state()   # where the history was read up to: {"inode", "offset", "high"}
        self.sending = False
        self.wait_until = 0.0

    def read_outbox(self):
        try:
            lines = self.outbox.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            try:
                found.append(json.loads(line))
            except ValueError:
                pass  # a line cut short by a stop mid-write
        return found

    def read_state(self):
        try:
            return json.loads(self.state_path.read_text())
        except (FileNotFoundError, ValueError):
            return {"inode": None, "offset": 0, "high": 0.0}

    def start(self):
        tornado.ioloop.PeriodicCallback(self.tick, SEND_EVERY * 1000).start()

    # ---- what happened -------------------------------------------------------------------------
    def add(self, kind, **fields):
        self.keep([{"kind": kind, "time": time.time(), **fields}])

    def keep(self, events):
        if not events:
            return
        self.pending += events
        if len(self.pending) > OUTBOX_LIMIT:
            self.pending = self.pending[-OUTBOX_LIMIT:]
            self.rewrite()
        else:
            with open(self.outbox, "a", encoding="utf-8") as outbox:
                outbox.write("".join(json.dumps(event) + "\n" for event in events))

    def unit_script(self, key, action, status, lines):
        """A unit's setup or Check, as the console ran it."""
        if action == "setup" and status == 0:
            self.add("setup", unit=key)
        elif action == "check" and status in (0, 1):
            self.add("check", unit=key, passed=status == 0, missing=(lines[0] if status and lines else None))

    def read_history(self):
        """The history's records appended since the last look (all of a new file: set-up made it anew)."""
        if self.history_path is None:
            return
        try:
            with open(self.history_path, "rb") as store:
                found = os.fstat(store.fileno())
                inode = found.st_ino
                renewed = inode != self.state["inode"] or found.st_size < self.state["offset"]
                offset = 0 if renewed else self.state["offset"]
                store.seek(offset)
                data = store.read(4 << 20)
        except FileNotFoundError:
            return
        whole = data[:data.rfind(b"\n") + 1]
        sent_up_to = self.state["high"]
        events = [event for event in map(delivery_event, whole.decode("utf-8", "replace").splitlines())
                  if event is not None]
        if renewed:  # a compacted history holds records already sent: only later ones are new
            events = [event for event in events if event["time"] > sent_up_to]
        high = max([sent_up_to] + [event["time"] for event in events])
        self.keep(events)
        state = {"inode": inode, "offset": offset + len(whole), "high": high}
        if state != self.state:
            self.state = state
            self.state_path.write_text(json.dumps(state))

    # ---- sent ----------------------------------------------------------------------------------
    async def tick(self):
        try:
            self.read_history()
        except OSError as error:
            log.warning("could not read the delivery history: %s", error)
        await self.send()

    async def send(self):
        if self.sending or not self.pending or time.monotonic() < self.wait_until:
            return
        self.sending = True
        batch = self.pending[:PER_POST]
        try:
            answer = await self.post(batch)
            status = answer.get("status", 200)
            if status in (400, 413):  # never accepted however often sent: dropped, said why
                log.warning("the course's service refused %d events: %s %s", len(batch), status, answer.get("reason"))
            elif status != 200:
                self.wait_until = time.monotonic() + (1 if status == 429 else 5)
                return
            self.pending = self.pending[len(batch):]
            self.rewrite()
        except (OSError, ValueError, asyncio.TimeoutError, tornado.httpclient.HTTPClientError,
                tornado.websocket.WebSocketError) as error:
            self.close()
            self.wait_until = time.monotonic() + 5
            log.warning("the course's service is not answering; events wait: %s", error)
        finally:
            self.sending = False

    async def post(self, batch):
        """The batch as one message on the lab's websocket (opened if it is not): the service's
        answer, {"kept": N} or {"status", "reason"}."""
        if self.socket is None:
            request = tornado.httpclient.HTTPRequest(self.url, headers={"Authorization": f"token {self.token}"},
                                                     connect_timeout=10, request_timeout=20)
            # Pinged: a connection that died unseen (a proxy gone) closes, and the next batch opens anew.
            self.socket = await tornado.websocket.websocket_connect(request, ping_interval=30)
        socket = self.socket
        await socket.write_message(json.dumps({"events": batch}))
        text = await asyncio.wait_for(socket.read_message(), 20)
        if text is None:  # closed: by the service for a message over its size limit (1009), or lost
            self.close()
            if socket.close_code == 1009:
                return {"status": 413, "reason": socket.close_reason}
            raise OSError(f"the connection closed ({socket.close_code} {socket.close_reason})")
        return json.loads(text)

    def close(self):
        if self.socket is not None:
            self.socket.close()
            self.socket = None

    def rewrite(self):
        temporary = self.outbox.with_name(self.outbox.name + ".new")
        temporary.write_text("".join(json.dumps(event) + "\n" for event in self.pending), encoding="utf-8")
        os.replace(temporary, self.outbox)


def delivery_event(line):
    """A delivery history record as the service's delivery event; None for any other line."""
    try:
        record = json.loads(line)
        registration, kind, when = record["id"], record["event"], float(record["time"])
        token = str(record["delivery"])
    except (ValueError, KeyError, TypeError):
        return None  # a trimmed note, a damaged line
    if not isinstance(registration, str) or not REGISTRATION.fullmatch(registration):
        return None
    event = {"kind": "delivery", "time": when, "event": str(kind), "registration": registration,
             "delivery": token}
    for name in FIELDS:
        if name in record:
            event[name] = record[name]
    return event


def from_environment(folder):
    """The lab's (CourseEvents, Inbox) under a course's hub; (None, None) elsewhere."""
    service = os.environ.get("NIGHTJAR_CONSOLE_GRADER", "")
    token = os.environ.get("JUPYTERHUB_API_TOKEN", "")
    if not (service and token):
        return None, None
    db = os.environ.get("NIGHTJAR_DB")
    return (CourseEvents(service, token, folder, history.store_path(db) if db else None),
            Inbox(service, token, folder))


class Inbox:
    """What the course's staff sent this learner, and each time they viewed their work
    (course/closeup.py: GET inbox), kept in the console's folder for the page (api/course)."""

    def __init__(self, service_url, token, folder):
        self.url = service_url.rstrip("/") + "/inbox"
        self.token = token
        self.path = Path(folder) / "course-inbox.json"
        try:
            self.kept = json.loads(self.path.read_text())
        except (FileNotFoundError, ValueError):
            self.kept = {"last": 0, "items": [], "dismissed": []}

    def start(self):
        tornado.ioloop.IOLoop.current().spawn_callback(self.run)

    async def run(self):
        while True:
            try:
                answer = await tornado.httpclient.AsyncHTTPClient().fetch(
                    f"{self.url}?after={self.kept['last']}", request_timeout=60,
                    headers={"Authorization": f"token {self.token}"})
                found = json.loads(answer.body)
                if found["items"]:
                    self.kept["items"] = (self.kept["items"] + found["items"])[-INBOX_KEPT:]
                    self.kept["last"] = found["last"]
                    self.save()
            except (tornado.httpclient.HTTPClientError, OSError, ValueError, KeyError) as error:
                log.warning("could not ask the course's service for messages: %s", error)
                await asyncio.sleep(5)

    def save(self):
        temporary = self.path.with_name(self.path.name + ".new")
        temporary.write_text(json.dumps(self.kept))
        os.replace(temporary, self.path)

    def shown(self):
        """The messages not dismissed, and the staff's views, the latest last."""
        dismissed = set(self.kept["dismissed"])
        return {"messages": [item for item in self.kept["items"]
                             if item["kind"] == "message" and item["id"] not in dismissed],
                "views": [item for item in self.kept["items"] if item["kind"] == "view"][-5:]}

    def dismiss(self, number):
        if number not in self.kept["dismissed"]:
            self.kept["dismissed"].append(number)
            self.save()


INBOX_KEPT = 200


def routes(shared):
    """The console page's view of its inbox: GET api/course, POST api/course/dismiss {"id"}."""
    from .app import Api

    class Shown(Api):
        def get(self):
            self.finish(self.settings["course_inbox"].shown())

    class Dismiss(Api):
        def post(self):
            number = self.body_json().get("id")
            if not isinstance(number, int):
                self.fail(400, 'send {"id": N}, a message\'s id')
            self.settings["course_inbox"].dismiss(number)
            self.finish({"dismissed": number})

    return [(r"/api/course", Shown, shared), (r"/api/course/dismiss", Dismiss, shared)]
