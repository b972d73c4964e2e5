#!/usr/bin/env python3
"""Run the lab as local processes: `make local` (start) and `make stop` (stop).

start: find a RabbitMQ (NIGHTJAR_AMQP_URL if it answers, otherwise a private
       node started here when rabbitmq-server is installed), create the live
       database, start the site and the lab console (with its agent in the
       Workstation folder) in the background, copy ticket-desk/ to the
       learner's Workstation folder (never over an existing one), wait until
       they answer and say what to do next.
       It also starts, in the background, a second node kept for grading
       (nightjar/harness/gradingnode.py): make grade then grades in seconds,
       on a broker apart from the live one.
stop:  stop, by pid, what start started: the console, its agent, the site,
       the grading node and the private node.

Same programs and code paths as the containers; only the addresses differ.
The broker is local_broker.py's, the background programs local_programs.py's,
the state in var/ local_state.py's.
Where things live (overridable, e.g. for the tests):
  NIGHTJAR_LOCAL_VAR          state, logs, pid files      (default: var/ in the repository)
  NIGHTJAR_WORKSTATION        the Workstation folder      (default: workstation/ticket-desk)
  NIGHTJAR_LOCAL_BROKER_PORT  the private node's AMQP port (default: 5692)
  NIGHTJAR_LOCAL_MANAGEMENT_PORT  its management UI      (default: that port + 10000, else a free one)
  NIGHTJAR_LOCAL_NODE         the private node's name      (default: nightjar-local@localhost)
  NIGHTJAR_SITE_HOST, NIGHTJAR_SITE_PORT                  (default: 127.0.0.1, 8000)
  NIGHTJAR_LAB_PORT           the lab console's port on 127.0.0.1 (default: 8080)
"""

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from nightjar.config import workstation_folder
from nightjar.harness import gradingnode
from nightjar.harness.siteprobe import site_answers

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its parts beside it, also under runpy
from local_broker import find_broker, login_of, management_answers, stop_private_node  # noqa: E402
from local_programs import AGENT, CONSOLE, SITE  # noqa: E402
from local_state import STATE, VAR, load_state, say  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORKSTATION = workstation_folder()
ENV_FILE = VAR / "local.env"


# ---------------------------------------------------------------- the site and the console

def site_address():
    host = os.environ.get("NIGHTJAR_SITE_HOST") or "127.0.0.1"
    port = int(os.environ.get("NIGHTJAR_SITE_PORT") or 8000)
    return host, port


def site_url(host, port):
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}/"


def lab_env(settings, **more):
    """The environment of make local's programs: the live lab's settings."""
    env = dict(os.environ, NIGHTJAR_AMQP_URL=settings.amqp_url, NIGHTJAR_DB=settings.db_path,
               NIGHTJAR_QUEUE=settings.queue, PYTHONUNBUFFERED="1", **more)
    if settings.management_url:
        env["NIGHTJAR_MANAGEMENT_URL"] = settings.management_url
    return env


def start_site(settings, state):
    host, port = site_address()
    env = lab_env(settings, NIGHTJAR_SITE_HOST=host, NIGHTJAR_SITE_PORT=str(port))
    return SITE.start(state, env=env, settings={"url": site_url(host, port), "amqp_url": settings.amqp_url},
                      port=("127.0.0.1" if host == "0.0.0.0" else host, port), port_setting="NIGHTJAR_SITE_PORT",
                      ready=lambda: site_answers(site_url(host, port)))


def socket_answers(path):
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
            return True
        except OSError:
            return False


def start_console(settings, state, management):
    """The lab console on 127.0.0.1:NIGHTJAR_LAB_PORT, its agent in the Workstation folder:
    the same programs as the containers' console and Workstation. Its URL, token included."""
    data = VAR / "console"
    agent_socket = data / "terminal.sock"
    port = int(os.environ.get("NIGHTJAR_LAB_PORT") or 8080)
    env = lab_env(settings, NIGHTJAR_WORKSTATION=str(WORKSTATION), NIGHTJAR_LOCAL_VAR=str(VAR),
                  NIGHTJAR_CONSOLE_DATA=str(data), NIGHTJAR_CONSOLE_SOCKET=str(agent_socket),
                  NIGHTJAR_CONSOLE_PORT=str(port), NIGHTJAR_LAB_PORT=str(port),
                  NIGHTJAR_SITE_PORT=str(site_address()[1]),
                  # A broker of the learner's own may run no management UI: the page then says so.
                  NIGHTJAR_MANAGEMENT_PORT=str(urlsplit(settings.management_api).port or 15672)
                  if management else "none")
    if sys.prefix != sys.base_prefix:  # the lab's .venv: the console's shell activates it
        env["VIRTUAL_ENV"] = sys.prefix
    lab = {"amqp_url": settings.amqp_url, "db": settings.db_path, "workstation": str(WORKSTATION)}
    AGENT.start(state, args=("--socket", str(agent_socket)), env=env, cwd=WORKSTATION, settings=lab,
                ready=lambda: socket_answers(agent_socket))
    CONSOLE.start(state, env=env, settings=dict(lab, port=port), port=("127.0.0.1", port),
                  port_setting="NIGHTJAR_LAB_PORT", ready=lambda: site_answers(f"http://127.0.0.1:{port}/"))
    url = subprocess.run([sys.executable, "-m", "nightjar_console", "url"], env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    return url


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

    workstation = prepare_workstation()  # before the console: its agent's shell starts in it
    start_site(settings, state)
    management = management_answers(settings)
    console = start_console(settings, state, management)
    if gradingnode.running(VAR):
        say("Grading node: already running (make grade grades on it)")
    elif gradingnode.start(VAR) is not None:
        say("Grading node: starting in the background (make grade grades on it, apart from the"
            " live broker)")
    say(f"Workstation: {WORKSTATION} ({workstation})")
    changed = write_env_file(settings)

    host, port = site_address()
    say()
    say(f"The lab console: {console}")
    say(f"The Nightjar site: {site_url(host, port)}")
    if management:
        say(f"RabbitMQ management UI: {settings.management_api} ({login_of(settings.amqp_url)})")
    say()
    say("Next, in the lab console's terminal, or in a terminal of your own:")
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
    say("make stop stops the site, the console, the grading node and the private RabbitMQ node."
        if state.get("broker") else "make stop stops the site, the console and the grading node.")
    return 0


def stop():
    state = load_state()
    for program in (CONSOLE, AGENT, SITE):
        program.stop(state)
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
