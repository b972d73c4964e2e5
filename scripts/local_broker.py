"""make local's RabbitMQ: the broker NIGHTJAR_AMQP_URL names when it answers, else a private node under var/.

The private node outlives make local (make stop stops it); its name and
ports come from NIGHTJAR_LOCAL_NODE, NIGHTJAR_LOCAL_BROKER_PORT and
NIGHTJAR_LOCAL_MANAGEMENT_PORT (see local.py).
"""

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

from nightjar.harness.rabbitnode import find_tool, free_port, node_environment

from local_state import VAR, port_open, save_state, say

NODE_DIR = VAR / "rabbitmq"
NODE_NAME = os.environ.get("NIGHTJAR_LOCAL_NODE") or "nightjar-local@localhost"


def broker_answers(settings):
    from nightjar import broker
    try:
        connection = broker.connect(settings)
    except broker.BrokerUnavailable:
        return False
    try:
        broker.declare_queues(connection.channel(), settings)
    finally:
        connection.close()
    return True


def node_env(port, management_port=None):
    # A fixed distribution port (port + 20000): the node outlives this process.
    return node_environment(NODE_DIR, NODE_NAME, port, port + 20000, management_port)


def management_port_for(port):
    """The private node's management UI port: the chosen one, else port + 10000 when free."""
    chosen = os.environ.get("NIGHTJAR_LOCAL_MANAGEMENT_PORT")
    if chosen:
        return int(chosen)
    return port + 10000 if not port_open("127.0.0.1", port + 10000) else free_port()


def start_private_node(port):
    """Start a RabbitMQ node of our own under var/; returns its state, or None on failure."""
    server = find_tool("rabbitmq-server")
    if not 0 < port <= 65535 - 20000:
        say(f"NIGHTJAR_LOCAL_BROKER_PORT must be at most {65535 - 20000}: the node also uses"
            " that port + 20000 (for its command-line tools).")
        return None
    for busy in (port, port + 20000):
        if port_open("127.0.0.1", busy):
            say(f"Port {busy} is in use, so the private RabbitMQ node cannot start there;"
                " choose another with NIGHTJAR_LOCAL_BROKER_PORT.")
            return None
    # The management plugin lets the learner watch the queue (and desk.py
    # status count unacknowledged deliveries); it costs about 2 s at start.
    management_port = management_port_for(port)
    env = node_env(port, management_port)
    say(f"Starting a private RabbitMQ node ({NODE_NAME}, port {port}, data in {NODE_DIR})")
    subprocess.run([server, "-detached"], env=env, cwd=NODE_DIR, check=False,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Ready when AMQP answers: polling the port is seconds quicker than
    # `rabbitmqctl wait`, whose own Erlang VM has to start first.
    pidfile = Path(env["RABBITMQ_PID_FILE"])
    deadline = time.monotonic() + 60
    while not port_open("127.0.0.1", port):
        if time.monotonic() > deadline or node_died(pidfile):
            say(f"The private RabbitMQ node did not start; see {NODE_DIR / 'log'}.")
            return None
        time.sleep(0.2)
    return {"node": NODE_NAME, "port": port, "pidfile": str(pidfile),
            "url": f"amqp://guest:guest@127.0.0.1:{port}/%2F",
            "management_url": f"http://127.0.0.1:{management_port}/"}


def node_died(pidfile):
    """True once the node wrote its pid file and that process is gone."""
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
    except (FileNotFoundError, ValueError):
        return False  # not written yet
    except ProcessLookupError:
        return True
    return False


def management_port_of(node):
    from urllib.parse import urlsplit
    return urlsplit(node["management_url"]).port if node.get("management_url") else None


def login_of(amqp_url):
    from urllib.parse import unquote, urlsplit
    parts = urlsplit(amqp_url)
    user, password = unquote(parts.username or "guest"), unquote(parts.password or "guest")
    if (user, password) == ("guest", "guest"):
        return "user guest, password guest"
    return f"user {user}, the password in NIGHTJAR_AMQP_URL"


def management_answers(settings):
    from nightjar import broker
    try:
        broker.unacknowledged_count(settings)
    except broker.NotCounted as reason:
        return reason.answered
    return True


def stop_private_node(node):
    ctl = find_tool("rabbitmqctl")
    if not ctl:
        return
    env = node_env(node["port"], management_port_of(node))
    result = subprocess.run([ctl, "-n", node["node"], "stop", node["pidfile"]], env=env,
                            cwd=NODE_DIR, capture_output=True, text=True)
    if result.returncode == 0:
        say(f"Stopped the private RabbitMQ node {node['node']}.")
    else:
        say(f"The private RabbitMQ node {node['node']} was not running.")


def find_broker(settings, state):
    """(settings to use, how we got the broker, private node state or None); exits when none.

    A private node it starts is saved in `state` at once.
    """
    from nightjar.config import redact_url
    previous = state.get("broker")
    if previous:
        mine = dataclasses.replace(settings, amqp_url=previous["url"],
                                   management_url=previous.get("management_url", ""))
        if broker_answers(mine):
            return mine, "the private node make local started earlier", previous
    if broker_answers(settings):
        return settings, "already running", None
    say(f"No RabbitMQ answers at {redact_url(settings.amqp_url)}.")
    if not find_tool("rabbitmq-server"):
        say("Install RabbitMQ (apt-get install rabbitmq-server) or set NIGHTJAR_AMQP_URL to a"
            " running broker, then run make local again.")
        sys.exit(1)
    port = int(os.environ.get("NIGHTJAR_LOCAL_BROKER_PORT") or 5692)
    node = start_private_node(port)
    if node is None:
        sys.exit(1)
    # Saved at once: make stop must find the node even if a later step fails.
    state["broker"] = node
    save_state(state)
    mine = dataclasses.replace(settings, amqp_url=node["url"], management_url=node["management_url"])
    if not broker_answers(mine):
        say("The private RabbitMQ node started but does not accept connections; run make stop.")
        sys.exit(1)
    return mine, "private node started by make local", node
