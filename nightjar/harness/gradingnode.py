"""The grading node `make local` keeps: a second RabbitMQ node for warm gradings, apart from the live one.

make local starts it in the background (start), the grader grades on it
while it answers (find), and make stop stops it and deletes its data
(stop). It is a node of its own (own name, ports and data under var/), so
grading never touches the live broker; each grading on it uses queues (and,
sandboxed, a vhost) of its own. Its administrator login is random and kept
in a file only this user can read.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pika
import pika.exceptions

from .rabbitnode import find_tool, free_port, node_environment

STATE_FILE = "grading-node.json"
FOLDER = "grading-node"
USER = "nightjar-grader"


def _state(var):
    try:
        return json.loads((Path(var) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def start(var):
    """Start the node in the background (it needs a few seconds); its state, or None without RabbitMQ."""
    server = find_tool("rabbitmq-server")
    if server is None:
        return None
    folder = Path(var) / FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    password = secrets.token_urlsafe(18)
    port, dist_port, management_port = free_port(), free_port(), free_port()
    name = f"nightjar-grading-{secrets.token_hex(3)}@localhost"
    env = node_environment(folder, name, port, dist_port, management_port, login=(USER, password))
    subprocess.run([server, "-detached"], env=env, cwd=folder, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = {"node": name, "pidfile": env["RABBITMQ_PID_FILE"], "folder": str(folder),
             "url": f"amqp://{USER}:{password}@127.0.0.1:{port}/%2F",
             "management_url": f"http://127.0.0.1:{management_port}/"}
    # Written at once, for this user alone: make stop must find it, and it holds the password.
    fd = os.open(Path(var) / STATE_FILE, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(state, file)
    return state


def running(var):
    """Whether make local's grading node runs (or is starting)."""
    state = _state(var)
    return state is not None and _alive(state)


def find(var, wait=30.0):
    """(AMQP URL, management URL) of the kept node once it answers, or None when there is none."""
    state = _state(var)
    if state is None or not _alive(state):
        return None
    params = pika.URLParameters(state["url"])
    params.connection_attempts, params.socket_timeout = 1, 2
    deadline = time.monotonic() + wait
    while True:
        try:
            pika.BlockingConnection(params).close()
            return state["url"], state["management_url"]
        except (pika.exceptions.AMQPError, OSError):
            if time.monotonic() > deadline or not _alive(state):
                return None
            time.sleep(0.2)


def _pid(state):
    try:
        return int(Path(state["pidfile"]).read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(state):
    """Starting (no pid file yet, for a while) or running."""
    pid = _pid(state)
    if pid is None:
        return Path(state["folder"]).is_dir()
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop(var):
    """Stop the node (it holds nothing worth a clean shutdown) and delete its data; True if it ran."""
    state = _state(var)
    if state is None:
        return False
    deadline = time.monotonic() + 10
    while _pid(state) is None and Path(state["folder"]).is_dir() and time.monotonic() < deadline:
        time.sleep(0.2)  # still starting: wait for its pid
    pid, was_running = _pid(state), False
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            was_running = True
        except ProcessLookupError:
            pass
    shutil.rmtree(state["folder"], ignore_errors=True)
    (Path(var) / STATE_FILE).unlink(missing_ok=True)
    return was_running
