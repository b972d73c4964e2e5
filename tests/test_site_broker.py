"""The site with RabbitMQ down, then back; and many guests registering at once."""

import json
import threading
import time
from urllib.parse import quote

from labkit import Lab, ticket_rows
from nightjar.harness.rabbitnode import PrivateNode
from nightjar.sandbox.rabbitadmin import Admin
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
