"""A course's lab sends its events to the course's service (nightjar_console/course_events.py):
its delivery history as the worker appends it, kept in an outbox while the service does not
answer, and sent once it does, after a console restart too, on one websocket kept open. A
small server of this test stands for the service (the real one is test_course.py's)."""

import json

import tornado.web
import tornado.websocket

from browserkit import run_apart
from nightjar.harness.rabbitnode import free_port
from nightjar_console.course_events import CourseEvents


class Service:
    """The websocket events/socket: its opening refused with `status` until that is 200, then
    each message answered with `answer` (None: kept, {"kept": N}); what it kept."""

    def __init__(self):
        self.status, self.answer, self.kept, self.tokens, self.connections = 503, None, [], set(), 0
        service = self

        class Events(tornado.websocket.WebSocketHandler):
            max_message_size = 4096  # above it, tornado closes the socket (1009), as the service's does

            def prepare(self):
                service.tokens.add(self.request.headers["Authorization"])
                if service.status != 200:
                    raise tornado.web.HTTPError(service.status)
                service.connections += 1

            def on_message(self, body):
                events = json.loads(body)["events"]
                if service.answer is None:
                    service.kept += events
                self.write_message(json.dumps(service.answer or {"kept": len(events)}))

        self.port = free_port()
        self.server = tornado.web.Application([(r"/events/socket", Events)]).listen(self.port, "127.0.0.1")


def record(path, **fields):
    with open(path, "a") as store:
        store.write(json.dumps(fields) + "\n")


def test_a_labs_events_wait_for_the_service_and_survive_a_console_restart(tmp_path):
    async def scenario():
        service = Service()
        history = tmp_path / "nightjar.history.jsonl"
        url = f"http://127.0.0.1:{service.port}/"

        def console():
            return CourseEvents(url, "lab-token", tmp_path, history)

        events = console()
        record(history, id="R-0002", delivery="d1", event="received", time=1.0, redelivered=False, after=0)
        record(history, id="R-0002", delivery="d1", event="interrupted", time=2.0)
        events.unit_script("2", "check", 1, ["missing: a registration named Retry guest with one ticket", "..."])
        await events.tick()  # the service answers 503: nothing is lost
        assert service.kept == [] and len(events.pending) == 3
        # The console restarts: its outbox and where it read the history up to are kept.
        events = console()
        record(history, id="R-0002", delivery="d2", event="received", time=3.0, redelivered=True, after=0)
        record(history, id="R-0002", delivery="d2", event="ack", time=3.5, committed=[2])
        service.status = 200
        events.wait_until = 0
        await events.tick()
        # In the order the console heard of them (the Check first: it reads the history each second).
        assert [(e["kind"], e.get("event"), e.get("delivery")) for e in service.kept] == [
            ("check", None, None), ("delivery", "received", "d1"), ("delivery", "interrupted", "d1"),
            ("delivery", "received", "d2"), ("delivery", "ack", "d2")]
        assert service.kept[0]["missing"] == "missing: a registration named Retry guest with one ticket"
        assert service.kept[4]["committed"] == [2] and service.tokens == {"token lab-token"}
        # The history compacted (a new file holding what was sent) sends only what is new.
        history.unlink()
        record(history, id="R-0002", delivery="d2", event="received", time=3.0, redelivered=True, after=0)
        record(history, id="R-0003", delivery="d3", event="received", time=4.0, redelivered=False, after=0)
        await events.tick()
        assert [e["delivery"] for e in service.kept[5:]] == ["d3"]
        assert events.pending == [] and (tmp_path / "course-events.jsonl").read_text() == ""
        # A batch the service refuses whole (413: too large) is dropped, never sent again.
        service.answer = {"status": 413, "reason": "at most 65536 bytes of events a post"}
        record(history, id="R-0003", delivery="d3", event="ack", time=4.5, committed=[3])
        await events.tick()
        assert events.pending == [] and len(service.kept) == 6
        # Every post since the service answered went on one connection, kept open.
        assert service.connections == 1
        # A batch over the service's message limit closes the socket (1009): dropped as a 413,
        # and the next batch opens another.
        service.answer = None
        record(history, id="R-0003", delivery="d3", event="raised", time=5.0, type="ValueError", message="x" * 5000)
        await events.tick()
        assert events.pending == [] and len(service.kept) == 6
        record(history, id="R-0004", delivery="d4", event="received", time=6.0, redelivered=False, after=0)
        await events.tick()
        assert [e["delivery"] for e in service.kept[6:]] == ["d4"] and service.connections == 2
        service.server.stop()

    run_apart(scenario())
