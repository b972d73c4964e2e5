"""Helpers the tests share: an isolated lab (own queue, own database) and real worker processes."""

import os
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from nightjar import broker, db as database, queueing
from nightjar.harness import processes
from nightjar.harness.processes import Running  # noqa: F401  (tests use labkit.Running)
from nightjar.config import Settings

ROOT = Path(__file__).resolve().parents[1]
TICKET_DESK = ROOT / "ticket-desk"
# Nothing listens there: desk.py status prints the same lines on every machine,
# whether or not the machine's RabbitMQ has its management plugin.
NO_MANAGEMENT_URL = "http://127.0.0.1:9/"
NO_MANAGEMENT_LINE = (f"Unacknowledged deliveries: the RabbitMQ management API does not answer at"
                      f" {NO_MANAGEMENT_URL}; set NIGHTJAR_MANAGEMENT_URL, or run rabbitmqctl"
                      " list_queues name messages_unacknowledged on the broker's machine.")
HANDLERS = {
    "starting": TICKET_DESK / "handler.py",
    "unit2": ROOT / "scenarios" / "unit2-ack-after-commit" / "solution" / "handler.py",
    "unit3": ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py",
}


@dataclass
class Lab:
    """One test's own queue and database, and a Workstation folder to run the worker in."""

    tmp: Path
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/%2F"
    queue: str = field(default_factory=lambda: f"test.{uuid.uuid4().hex[:12]}")
    extra_env: dict = field(default_factory=dict)

    def __post_init__(self):
        self.db_path = str(self.tmp / "nightjar.db")
        self.workdir = self.tmp / "ticket-desk"
        shutil.copytree(TICKET_DESK, self.workdir, ignore=shutil.ignore_patterns("__pycache__"))

    @property
    def settings(self):
        return Settings.from_env(self.env)

    @property
    def env(self):
        env = dict(os.environ)
        env.update(NIGHTJAR_AMQP_URL=self.amqp_url, NIGHTJAR_DB=self.db_path,
                   NIGHTJAR_QUEUE=self.queue, PYTHONUNBUFFERED="1",
                   NIGHTJAR_MANAGEMENT_URL=NO_MANAGEMENT_URL)
        env.update(self.extra_env)
        return env

    def use_handler(self, name_or_path):
        source = HANDLERS.get(name_or_path, name_or_path)
        shutil.copyfile(source, self.workdir / "handler.py")

    def db(self):
        return database.connect(self.db_path)

    def register(self, name):
        """Register and queue a guest through the site's code path; returns the ID."""
        registration_id, queued = queueing.register_at(self.db_path, self.settings, name)
        assert queued, "RabbitMQ did not confirm the job"
        return registration_id

    def tickets(self, registration_id=None):
        db = self.db()
        try:
            sql = "SELECT number, registration_id, name FROM tickets"
            if registration_id is None:
                return db.execute(sql + " ORDER BY number").fetchall()
            return db.execute(sql + " WHERE registration_id = ? ORDER BY number",
                              (registration_id,)).fetchall()
        finally:
            db.close()

    def completed(self, registration_id):
        db = self.db()
        try:
            return db.execute("SELECT 1 FROM completed WHERE id = ?", (registration_id,)).fetchone() is not None
        finally:
            db.close()

    def depth(self):
        """(ready, dead-lettered) messages, read without consuming."""
        return broker.queue_depths(self.settings)

    def publish_raw(self, body):
        import pika
        connection = broker.connect(self.settings)
        try:
            channel = broker.open_channel(connection, self.settings)
            channel.basic_publish("", self.queue, body,
                                  pika.BasicProperties(delivery_mode=2), mandatory=True)
        finally:
            connection.close()

    def run(self, program, *args, input="", timeout=30):
        """Run worker.py or desk.py to the end; CompletedProcess with text output."""
        return processes.run(self.workdir, self.env, program, *args, input=input, timeout=timeout)

    def start(self, program, *args):
        """Start worker.py or desk.py with pipes, for interrupting it."""
        return processes.start(self.workdir, self.env, program, *args)

    def cleanup(self):
        try:
            broker.delete_queues(self.settings)
        except broker.BrokerUnavailable:
            pass


def processes_mentioning(*texts):
    """PIDs of live (non-zombie) processes whose command line contains every text."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if not all(text.encode() in cmdline for text in texts):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found
