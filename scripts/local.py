#!/usr/bin/env python3
"""Run the lab as local processes: `make local` (start) and `make stop` (stop).

start: find a RabbitMQ (NIGHTJAR_AMQP_URL if it answers, otherwise a private
       node started here when rabbitmq-server is installed), create the live
       database, start the site in the background, copy ticket-desk/ to the
       learner's Workstation folder (never over an existing one), wait until
       the site answers and say what to do next.
       It also starts, in the background, a second node kept for grading
       (nightjar/harness/gradingnode.py): make grade then grades in seconds,
       on a broker apart from the live one.
stop:  stop, by pid, what start started: the site, the grading node and the
       private node.

Same programs and code paths as the containers; only the addresses differ.
The broker is local_broker.py's, the state in var/ local_state.py's.
Where things live (overridable, e.g. for the tests):
  NIGHTJAR_LOCAL_VAR          state, logs, pid files      (default: var/ in the repository)
  NIGHTJAR_WORKSTATION        the Workstation folder      (default: workstation/ticket-desk)
  NIGHTJAR_LOCAL_BROKER_PORT  the private node's AMQP port (default: 5692)
  NIGHTJAR_LOCAL_MANAGEMENT_PORT  its management UI      (default: that port + 10000, else a free one)
  NIGHTJAR_LOCAL_NODE         the private node's name      (default: nightjar-local@localhost)
  NIGHTJAR_SITE_HOST, NIGHTJAR_SITE_PORT                  (default: 127.0.0.1, 8000)
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from nightjar.config import workstation_folder
from nightjar.harness import gradingnode
from nightjar.harness.siteprobe import site_answers

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts beside it, also under runpy
from local_broker import find_broker, login_of, management_answers, stop_private_node  # noqa: E402
from local_state import STATE, VAR, load_state, port_open, save_state, say  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKSTATION = workstation_folder()
SITE_PID = VAR / "site.pid"
SITE_LOG = VAR / "site.log"
ENV_FILE = VAR / "local.env"


# ---------------------------------------------------------------- the site

def is_site_process(pid):
    """True when pid is alive and is a Nightjar site (not a recycled pid of something else)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"nightjar_site" in cmdline


def site_address():
    host = os.environ.get("NIGHTJAR_SITE_HOST") or "127.0.0.1"
    port = int(os.environ.get("NIGHTJAR_SITE_PORT") or 8000)
    return host, port


def site_url(host, port):
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/"


def start_site(settings, state):
    """Start the site in the background (or keep the one make local started); returns the pid."""
    host, port = site_address()
    previous = state.get("site") or {}
    if previous.get("pid") and is_site_process(previous["pid"]):
        if previous.get("url") == site_url(host, port) and previous.get("amqp_url") == settings.amqp_url:
            say(f"The site is already running (pid {previous['pid']}).")
            return previous["pid"]
        stop_site(previous["pid"])
    if port_open("127.0.0.1" if host == "0.0.0.0" else host, port):
        say(f"Port {port} is already in use by another program; stop it or choose another port"
            " with NIGHTJAR_SITE_PORT.")
        sys.exit(1)
    env = dict(os.environ, NIGHTJAR_AMQP_URL=settings.amqp_url, NIGHTJAR_DB=settings.db_path,
               NIGHTJAR_QUEUE=settings.queue, NIGHTJAR_SITE_HOST=host, NIGHTJAR_SITE_PORT=str(port),
               PYTHONUNBUFFERED="1")
    with open(SITE_LOG, "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "nightjar_site"], cwd=ROOT, env=env,
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    SITE_PID.write_text(f"{process.pid}\n")
    state["site"] = {"pid": process.pid, "url": site_url(host, port), "amqp_url": settings.amqp_url}
    save_state(state)
    wait_for_site(process, site_url(host, port))
    say(f"Started the site (pid {process.pid}; log {SITE_LOG}).")
    return process.pid


def wait_for_site(process, url, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            say(f"The site stopped at once (exit status {process.returncode}). The end of {SITE_LOG}:")
            say("\n".join(SITE_LOG.read_text(errors="replace").splitlines()[-15:]))
            sys.exit(1)
        if site_answers(url):
            return
        time.sleep(0.1)
    say(f"The site did not answer at {url} within {timeout} s; see {SITE_LOG}.")
    sys.exit(1)


def stop_site(pid):
    if not is_site_process(pid):
        say("The site was not running.")
        return
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if not is_site_process(pid):
            break
        time.sleep(0.1)
    else:
        os.kill(pid, signal.SIGKILL)
    say(f"Stopped the site (pid {pid}).")


# ---------------------------------------------------------------- commands

def prepare_workstation():
    if WORKSTATION.exists():
        return "kept as it is, with your edits"
    from nightjar.harness.lab import copy_workstation
    copy_workstation(WORKSTATION)  # the learner's files only; the container build files stay behind
    return "created from ticket-desk/"


def write_env_file(settings):
    """The NIGHTJAR_* values that differ from the defaults, written as a file to `source`.

    Returns them (name -> value), or {} when everything is at its default.
    """
    from nightjar import config
    changed = {}
    if settings.amqp_url != config.DEFAULT_AMQP_URL:
        changed["NIGHTJAR_AMQP_URL"] = settings.amqp_url
    if settings.db_path != config.default_db_path():
        changed["NIGHTJAR_DB"] = settings.db_path
    if settings.queue != config.DEFAULT_QUEUE:
        changed["NIGHTJAR_QUEUE"] = settings.queue
    if settings.management_url:
        changed["NIGHTJAR_MANAGEMENT_URL"] = settings.management_url
    if not changed:
        ENV_FILE.unlink(missing_ok=True)
        return changed
    # It may hold a broker password: readable by this user only.
    fd = os.open(ENV_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        for name, value in changed.items():
            handle.write(f"export {name}={shlex.quote(value)}\n")
    return changed


def start():
    from nightjar import db as nightjar_db
    from nightjar.config import Settings, redact_url

    VAR.mkdir(parents=True, exist_ok=True)
    state = load_state()
    settings, how, _node = find_broker(Settings.from_env(), state)
    say(f"RabbitMQ: {redact_url(settings.amqp_url)} ({how})")

    nightjar_db.connect(settings.db_path).close()
    say(f"Database: {settings.db_path}")

    start_site(settings, state)
    if gradingnode.running(VAR):
        say("Grading node: already running (make grade grades on it)")
    elif gradingnode.start(VAR) is not None:
        say("Grading node: starting in the background (make grade grades on it, apart from the"
            " live broker)")
    workstation = prepare_workstation()
    say(f"Workstation: {WORKSTATION} ({workstation})")
    changed = write_env_file(settings)

    host, port = site_address()
    say()
    say(f"The Nightjar site: {site_url(host, port)}")
    if management_answers(settings):
        say(f"RabbitMQ management UI: {settings.management_api} ({login_of(settings.amqp_url)})")
    say()
    say("Next, in a terminal:")
    say(f"  cd {shlex.quote(str(WORKSTATION))}")
    say(f"  source {shlex.quote(str(ROOT / '.venv' / 'bin' / 'activate'))}")
    if changed:
        say(f"  source {shlex.quote(str(ENV_FILE))}")
    say("  python3 worker.py")
    if changed:
        say()
        say(f"Settings that differ from the defaults (set by {ENV_FILE}):")
        for name, value in changed.items():
            say(f"  {name}={redact_url(value) if name == 'NIGHTJAR_AMQP_URL' else value}")
    say()
    say("make stop stops the site, the grading node and the private RabbitMQ node."
        if state.get("broker") else "make stop stops the site and the grading node.")
    return 0


def stop():
    state = load_state()
    site = state.get("site") or {}
    pid = site.get("pid")
    if pid is None and SITE_PID.exists():
        pid = int(SITE_PID.read_text().strip() or 0) or None
    if pid:
        stop_site(pid)
    else:
        say("The site was not started by make local.")
    SITE_PID.unlink(missing_ok=True)
    if gradingnode.stop(VAR):
        say("Stopped the grading node.")
    if state.get("broker"):
        stop_private_node(state["broker"])
    STATE.unlink(missing_ok=True)
    return 0


def main(argv):
    if argv == ["start"]:
        return start()
    if argv == ["stop"]:
        return stop()
    say("usage: local.py start|stop")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
