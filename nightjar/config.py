"""Configuration from the environment, with defaults for local use."""

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
DEFAULT_QUEUE = "nightjar.tickets"
DEFAULT_MANAGEMENT_PORT = 15672
REPO_ROOT = Path(__file__).resolve().parents[1]
WORKSTATION_ENV = "NIGHTJAR_WORKSTATION"


def workstation_folder(environ=None):
    """The learner's Workstation folder: NIGHTJAR_WORKSTATION, else workstation/ticket-desk here.

    make local fills it, the unit scripts set it up and check it, and the
    grader grades its handler.py.
    """
    env = os.environ if environ is None else environ
    return Path(env.get(WORKSTATION_ENV) or REPO_ROOT / "workstation" / "ticket-desk").resolve()


def local_var_folder(environ=None):
    """Where `make local` keeps its state (pid files, local.env, the grading node): NIGHTJAR_LOCAL_VAR, else var/."""
    env = os.environ if environ is None else environ
    return Path(env.get("NIGHTJAR_LOCAL_VAR") or REPO_ROOT / "var").resolve()


def default_db_path():
    data_home = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return str(Path(data_home) / "nightjar" / "nightjar.db")


@dataclass(frozen=True)
class Settings:
    amqp_url: str
    db_path: str
    queue: str
    # Seconds between AMQP heartbeats; tests lower it to prove long pauses survive.
    heartbeat: int = 60
    # RabbitMQ's management API (NIGHTJAR_MANAGEMENT_URL); empty: see management_api.
    management_url: str = ""
    # Seconds a registration waits for RabbitMQ to confirm its job (NIGHTJAR_CONFIRM_SECONDS)
    # before it is reported as saved and waiting for the queue (nightjar/queueing.py).
    confirm_seconds: float = 5.0

    @property
    def dead_letter_queue(self):
        return f"{self.queue}.dead"

    @classmethod
    def from_env(cls, environ=None):
        env = os.environ if environ is None else environ
        return cls(
            amqp_url=env.get("NIGHTJAR_AMQP_URL") or DEFAULT_AMQP_URL,
            db_path=env.get("NIGHTJAR_DB") or default_db_path(),
            queue=env.get("NIGHTJAR_QUEUE") or DEFAULT_QUEUE,
            heartbeat=int(env.get("NIGHTJAR_HEARTBEAT") or 60),
            management_url=env.get("NIGHTJAR_MANAGEMENT_URL") or "",
            confirm_seconds=float(env.get("NIGHTJAR_CONFIRM_SECONDS") or 5.0),
        )

    @property
    def management_api(self):
        """The management API's base URL: NIGHTJAR_MANAGEMENT_URL, else port 15672 on the AMQP host."""
        if self.management_url:
            return self.management_url.rstrip("/") + "/"
        return f"http://{urlsplit(self.amqp_url).hostname or '127.0.0.1'}:{DEFAULT_MANAGEMENT_PORT}/"


def redact_url(url):
    """The URL without its password, safe to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc))
