"""A private RabbitMQ node beside the machine's own: where its programs are and how to set it up.

Used by the grader (a throwaway node per grading run) and by `make local`
(a lasting node under var/ when no broker answers). Each node has its own
name, ports, data directory and Erlang cookie (HOME); it shares only epmd,
which nothing here ever stops.
"""

import os
import shutil
import socket
from pathlib import Path

# As root, the /usr/sbin wrappers switch to the rabbitmq user, whose Erlang
# cookie differs from ours; the scripts behind them are called directly.
TOOL_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/sbin", "/opt/rabbitmq/sbin")


def find_tool(name):
    """The path of rabbitmq-server or rabbitmqctl, or None when RabbitMQ is not installed."""
    explicit = os.environ.get("NIGHTJAR_RABBITMQ_SERVER")
    if explicit:
        candidate = Path(explicit).with_name(name)
        return str(candidate) if os.access(candidate, os.X_OK) else None
    for folder in TOOL_DIRS:
        candidate = Path(folder) / name
        if os.access(candidate, os.X_OK):
            return str(candidate)
    found = shutil.which(name)
    if found and not found.startswith(("/usr/sbin/", "/sbin/")):
        return found
    return None


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def node_environment(directory, name, port, dist_port, management_port=None):
    """Environment for rabbitmq-server and rabbitmqctl of the node kept in `directory`.

    Writes the node's config files there: AMQP on 127.0.0.1:port only, no
    plugins unless a management port is given (without, it starts about 2 s
    faster), and an empty env file (the system's names the system node).
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    config = f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users.guest = true\n"
    plugins = "[]."
    if management_port:
        # Queue counts refreshed each second, not every 5 s: the learner watches them change.
        config += (f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {management_port}\n"
                   "collect_statistics_interval = 1000\n")
        plugins = "[rabbitmq_management]."
    (d / "rabbitmq.conf").write_text(config)
    (d / "enabled_plugins").write_text(plugins + "\n")
    (d / "rabbitmq-env.conf").write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RABBITMQ_", "ERL_")) and k != "NOTIFY_SOCKET"}
    env.update(
        HOME=str(d),  # the Erlang cookie lives here; writable whoever runs the node
        RABBITMQ_NODENAME=name,
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_DIST_PORT=str(dist_port),
        RABBITMQ_MNESIA_BASE=str(d / "mnesia"),
        RABBITMQ_LOG_BASE=str(d / "log"),
        RABBITMQ_PID_FILE=str(d / "node.pid"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(d / "enabled_plugins"),
        RABBITMQ_CONFIG_FILE=str(d / "rabbitmq.conf"),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(d / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(d / "rabbitmq-env.conf"),
        ERL_EPMD_ADDRESS="127.0.0.1",
        ERL_CRASH_DUMP=str(d / "erl_crash.dump"),
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
    )
    return env
