"""Private RabbitMQ nodes beside the machine's own: where RabbitMQ's programs are, how a node is set up, and PrivateNode, a throwaway one.

Used by the grader and the tests (a PrivateNode per grading run or test
session) and by `make local` (a lasting node under var/ when no broker
answers). Each node has its own
name, ports, data directory and Erlang cookie (HOME); it shares only epmd,
which nothing here ever stops.
"""

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pika
import pika.exceptions
from pika.adapters.utils.connection_workflow import AMQPConnectorException

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


def node_environment(directory, name, port, dist_port, management_port=None, login=None):
    """Environment for rabbitmq-server and rabbitmqctl of the node kept in `directory`.

    Writes the node's config files there: AMQP on 127.0.0.1:port only, no
    plugins unless a management port is given, and an empty env file (the
    system's names the system node). login=(user, password): the node's only
    user, an administrator, instead of guest.
    """
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    config = f"listeners.tcp.default = 127.0.0.1:{port}\nloopback_users.guest = true\n"
    if login:
        config += f"default_user = {login[0]}\ndefault_pass = {login[1]}\n"
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

# A throwaway node: thrown away whole afterwards, so stopping it is a kill of its
# process group rather than a graceful shutdown (nothing on it is worth the
# seconds a clean stop takes).

# $1 the grader's PID, $2 the node's process group, $3 the directory to delete.
WATCHDOG = ('while kill -0 "$1" 2>/dev/null; do sleep 0.5; done;'
            ' kill -KILL -"$2" 2>/dev/null; sleep 0.5; rm -rf "$3"')


class NodeError(Exception):
    """The private node could not be started; the text says why."""


class PrivateNode:
    """start() returns at once; wait_ready() blocks until AMQP answers; stop() kills and removes it.

    The node has one user, an administrator with a random password (no
    guest), and the management API on a port of its own: the grader's
    sandbox makes a vhost and a user per submission through it. Read url and
    management_url after wait_ready(): a node that lost its port to another
    program is started again on another.
    """

    USER = "nightjar-grader"

    def __init__(self, base=None, remove_if_orphaned=None):
        self.dir = Path(tempfile.mkdtemp(prefix="nightjar-grader-node-", dir=base))
        self.name = f"nightjar-grader-{os.getpid()}-{uuid.uuid4().hex[:6]}@localhost"
        self.password = secrets.token_urlsafe(18)
        self.process = None
        self.watchdog = None
        self.env = None  # rabbitmq-server's and rabbitmqctl's, from start()
        self.port = self.dist_port = None
        self.management_port = None
        self._remove_if_orphaned = Path(remove_if_orphaned or self.dir)

    @property
    def url(self):
        return f"amqp://{self.USER}:{self.password}@127.0.0.1:{self.port}/%2F"

    @property
    def management_url(self):
        return f"http://127.0.0.1:{self.management_port}/"

    def start(self, same_ports=False):
        server = find_tool("rabbitmq-server")
        if server is None:
            raise NodeError("rabbitmq-server is not installed here; install RabbitMQ or pass"
                            " --amqp-url with the address of a broker for grading")
        if not same_ports:
            self.port, self.dist_port, self.management_port = free_port(), free_port(), free_port()
        d = self.dir
        env = self.env = node_environment(d, self.name, self.port, self.dist_port, self.management_port,
                                          login=(self.USER, self.password))
        self._log = open(d / "server.out", "wb")
        # Its own session: the terminal's Ctrl+C does not reach it, and the
        # whole node (script, VM, port programs) is one process group to stop.
        self.process = subprocess.Popen(
            [server], env=env, cwd=d, stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, start_new_session=True)
        # Should this process die without cleaning up (SIGKILL), the watchdog
        # kills the node and deletes its files within a second.
        self.watchdog = subprocess.Popen(
            ["/bin/sh", "-c", WATCHDOG, "watchdog", str(os.getpid()), str(self.process.pid),
             str(self._remove_if_orphaned)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        return self

    def _probe(self):
        params = pika.URLParameters(self.url)
        params.connection_attempts = 1
        params.socket_timeout = 2
        return params

    def wait_ready(self, timeout=60):
        params = self._probe()
        deadline = time.monotonic() + timeout
        restarts = 0
        while True:
            if self.process.poll() is not None and self._lost_a_port() and restarts < 2:
                # Another program took a port between free_port() and the node
                # binding it (a busy machine): start again on other free ports.
                restarts += 1
                self.stop()
                params = self.start()._probe()
            if self.process.poll() is not None:
                raise NodeError(f"the private RabbitMQ node exited during start-up"
                                f" (status {self.process.returncode}): {self._tail()}")
            try:
                pika.BlockingConnection(params).close()
                return
            # Not up yet; a handshake that times out (pika raises it outside AMQPError) too.
            except (pika.exceptions.AMQPError, AMQPConnectorException, OSError):
                if time.monotonic() > deadline:
                    raise NodeError(f"the private RabbitMQ node did not accept connections within"
                                    f" {timeout:g} s: {self._tail()}") from None
                time.sleep(0.1)

    def _lost_a_port(self):
        try:
            return "eaddrinuse" in (self.dir / "server.out").read_text(errors="replace")
        except OSError:
            return False

    def _tail(self):
        try:
            lines = (self.dir / "server.out").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no output"
        interesting = [line for line in lines if "error" in line.lower()] or lines
        return " / ".join(interesting[-3:])[:500] or "no output"

    def ctl(self, *args, timeout=60):
        """rabbitmqctl on this node (after start()), e.g. ctl("set_vm_memory_high_watermark", "0.4");
        raises CalledProcessError when it fails."""
        return subprocess.run([find_tool("rabbitmqctl"), "-n", self.name, *args], env=self.env, cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout, check=True)

    def restart(self):
        """Kill the node as a crash would, and start it again on the same ports and data."""
        self._kill()
        self.start(same_ports=True).wait_ready()

    def stop(self):
        """Kill the node's processes, wait for them, delete its data. Safe to call twice."""
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _kill(self):
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
            self.watchdog = None
        if self.process is not None:
            # The VM's helpers (erl_child_setup and its port programs) start
            # sessions of their own; they end with the VM, but are killed
            # explicitly so nothing can outlive the node.
            helpers = _descendants(self.process.pid)
            for pid in [self.process.pid, *helpers]:
                try:
                    os.killpg(pid, signal.SIGKILL) if pid == self.process.pid else os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.process = None
            self._log.close()


def _descendants(pid):
    """PIDs of every process below pid, from /proc (empty where /proc is missing)."""
    children = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
