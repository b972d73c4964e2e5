"""The site with RabbitMQ down, then back; and many guests registering at once."""

import json
import re
import threading
import time
from urllib.parse import quote

from labkit import Lab, ticket_rows
from nightjar import queueing
from nightjar.config import Settings, redact_url
from nightjar.harness.rabbitnode import PrivateNode
from nightjar.rabbitadmin import Admin
from nightjar_site.database import PUBLISHER_NAME
from sitekit import FormClient, Site

UNUSED_BROKER = "amqp://guest:guest@127.0.0.1:1/%2F"


def queued_at(lab, registration_id):
    db = lab.db()
    try:
        return db.execute("SELECT queued_at FROM registrations WHERE id = ?",
                          (registration_id,)).fetchone()[0]
    finally:
        db.close()


def queued_names(lab):
    """Names of the guests (not the lab's R-0001) whose registration RabbitMQ confirmed."""
    db = lab.db()
    try:
        return [name for (name,) in db.execute(
            "SELECT name FROM registrations WHERE queued_at IS NOT NULL AND id != 'R-0001'")]
    finally:
        db.close()


def test_registration_saved_while_broker_is_down_is_queued_exactly_once_when_it_is_back(lab):
    down = Site(lab, amqp_url=UNUSED_BROKER, log_name="site-down.log")
    back = None
    try:
        guest = FormClient(down.url)
        registration_id = guest.register("Patient guest")
        assert registration_id == "R-0002"
        status, page = guest.get("registrations/R-0002")
        assert status == 200
        assert "<h2>Your ticket is being prepared</h2>" in page
        assert "<strong>Waiting to be queued.</strong>" in page
        assert "Waiting to be queued" in guest.get("registrations")[1]
        assert queued_at(lab, registration_id) is None
        assert lab.depth() == (0, 0)

        # RabbitMQ is back for a second site on the same database. The first
        # keeps running: it still cannot reach its broker and must not interfere.
        back = Site(lab, log_name="site-back.log")
        deadline = time.monotonic() + 15
        while queued_at(lab, registration_id) is None:
            assert time.monotonic() < deadline, back.log.read_text()
            time.sleep(0.2)
        time.sleep(3)  # three more rounds of the background thread: still one message
        assert lab.depth() == (1, 0)
        status, page = FormClient(back.url).get("registrations/R-0002")
        assert "Waiting to be queued" not in page and "saved and queued" in page
        worker = lab.run("worker.py", "--drain")
        assert worker.stdout == ("Received R-0002 redelivered=False\nHandler returned.\n"
                                 "No ready registrations\n")
        assert ticket_rows(lab.tickets(registration_id)) == [(2, registration_id, "Patient guest")]
        assert "queued 1 waiting registration(s): R-0002" in back.log.read_text()
    finally:
        down.stop()
        if back:
            back.stop()


def test_fifty_guests_at_once_get_fifty_consecutive_ids_and_fifty_messages(lab):
    site = Site(lab)
    try:
        guests = [FormClient(site.url) for _ in range(50)]
        tokens = [guest.token() for guest in guests]
        start = threading.Barrier(50)
        results, errors = [None] * 50, []

        def register(index):
            try:
                start.wait()
                results[index] = guests[index].post_name(f"Guest {index}", tokens[index])
            except Exception as error:  # reported below, with the others
                errors.append(repr(error))

        threads = [threading.Thread(target=register, args=(i,)) for i in range(50)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert errors == []
        assert {status for status, _ in results} == {303}
        ids = sorted(location.rsplit("/", 1)[1] for _, location in results)
        assert ids == [f"R-{n:04d}" for n in range(2, 52)]
        # On a busy machine a guest's own request may fail to reach RabbitMQ;
        # the registration is saved all the same and the site's background
        # round queues it (after its grace period). Either way: each one once.
        deadline = time.monotonic() + 30
        while len(queued_names(lab)) < 50:
            assert time.monotonic() < deadline, site.log.read_text()
            time.sleep(0.5)
        assert sorted(queued_names(lab)) == sorted(f"Guest {i}" for i in range(50))
        assert lab.depth() == (50, 0)
    finally:
        site.stop()


def close_the_sites_publisher(node):
    """Have RabbitMQ close the site's kept publisher connection (through its management API)."""
    admin = Admin(node.management_url, node.url)
    deadline = time.monotonic() + 15
    while not (names := [c["name"] for c in json.loads(admin.call("GET", "connections"))
                         if c.get("client_properties", {}).get("connection_name") == PUBLISHER_NAME]):
        assert time.monotonic() < deadline, "the site's publisher never showed"
        time.sleep(0.2)
    for name in names:
        admin.call("DELETE", f"connections/{quote(name, safe='')}")


def test_a_registration_after_rabbitmq_closed_the_sites_connection_is_queued_at_once(tmp_path):
    """The site keeps its publisher's connection between registrations (KeptPublisher); one
    RabbitMQ closed meanwhile is replaced before the next registration is published."""
    node = PrivateNode().start()
    site = None
    try:
        node.wait_ready()
        lab = Lab(tmp_path, amqp_url=node.url)
        lab.extra_env["NIGHTJAR_SITE_THREADS"] = "1"  # both registrations on the one publisher
        site = Site(lab, amqp_url=node.url, requeue_seconds=3600)  # no background round helps
        guest = FormClient(site.url)
        first = guest.register("Before the close")
        close_the_sites_publisher(node)
        second = guest.register("After the close")
        assert None not in (queued_at(lab, first), queued_at(lab, second))
        assert lab.depth() == (2, 0)
    finally:
        if site:
            site.stop()
        node.stop()


def waiting_line(page):
    """The registration page's line for a registration waiting to be queued, tags and all."""
    found = re.search(r'<p class="waiting">.*?</p>', page, re.S)
    return found and found.group(0)


def test_a_publish_rabbitmq_holds_returns_within_the_limit_and_is_queued_once_when_it_answers(tmp_path):
    """A memory alarm: RabbitMQ takes a publish and holds it unconfirmed. The POST returns after
    NIGHTJAR_CONFIRM_SECONDS, the page says the registration is saved and waiting, nothing is
    published again while RabbitMQ holds it, and once the alarm clears every registration is
    queued exactly once (a non-idempotent handler writes one ticket each)."""
    node = PrivateNode().start()
    site = None
    try:
        node.wait_ready()
        lab = Lab(tmp_path, amqp_url=node.url)
        limit = 2
        lab.extra_env.update(NIGHTJAR_CONFIRM_SECONDS=str(limit), NIGHTJAR_SITE_THREADS="1")
        site = Site(lab, amqp_url=node.url)  # its requeue loop every second
        guest = FormClient(site.url)
        before = guest.register("Before the alarm")
        node.ctl("set_vm_memory_high_watermark", "0.0001")

        timings = []
        for name in ("Held by RabbitMQ", "While it holds one"):
            token = guest.token()
            started = time.monotonic()
            status, location = guest.post_name(name, token)
            timings.append(time.monotonic() - started)
            assert status == 303, (status, location)
        held, after = f"R-{int(before[2:]) + 1:04d}", f"R-{int(before[2:]) + 2:04d}"
        # The first waits the limit out; the next is not published while RabbitMQ holds one.
        assert limit <= timings[0] < limit + 1.5 and timings[1] < 1, timings
        for registration_id in (held, after):
            status, page = guest.get(f"registrations/{registration_id}")
            assert status == 200
            assert waiting_line(page) == ('<p class="waiting"><strong>Waiting to be queued.</strong> The'
                                          ' registration is saved; the site queues it once RabbitMQ confirms it.</p>')
        # desk.py says the same in one line (on a database of its own, which no site queues from).
        desk = Lab(tmp_path / "desk", amqp_url=node.url)
        desk.extra_env["NIGHTJAR_CONFIRM_SECONDS"] = str(limit)
        broker_url = redact_url(node.url)
        for command, line in [
                (["register", "At the desk"], f"Registered R-0002, but RabbitMQ at {broker_url} has not confirmed"
                 f" it within {limit} s; it is saved, and the site queues it once RabbitMQ confirms.\n"),
                (["retry", "R-0001"], f"Sent a new delivery of R-0001, but RabbitMQ at {broker_url} has not"
                 f" confirmed it within {limit} s; it may still arrive.\n")]:
            started = time.monotonic()
            said = desk.run("desk.py", *command)
            assert (said.returncode, said.stdout, said.stderr) == (1, line, "")
            assert limit <= time.monotonic() - started < limit + 3
        time.sleep(queueing.grace_seconds(Settings.from_env(lab.env)) + 2)  # the requeue loop waits too
        assert (queued_at(lab, held), queued_at(lab, after)) == (None, None)

        node.ctl("set_vm_memory_high_watermark", "0.4")
        deadline = time.monotonic() + 30
        while None in (queued_at(lab, held), queued_at(lab, after)):
            assert time.monotonic() < deadline, site.log.read_text()
            time.sleep(0.2)
        time.sleep(3)  # three more rounds of the requeue loop: still one message each
        assert lab.depth() == (3, 0)
        drained = lab.run("worker.py", "--drain")  # the shipped handler: not idempotent
        assert drained.returncode == 0, drained.stderr
        assert [ticket_rows(lab.tickets(i)) for i in (before, held, after)] == [
            [(2, before, "Before the alarm")], [(3, held, "Held by RabbitMQ")], [(4, after, "While it holds one")]]
    finally:
        if site:
            site.stop()
        node.stop()
