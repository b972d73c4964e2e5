"""Private RabbitMQ nodes beside the machine's own: where RabbitMQ's programs are, how a node is set up, and PrivateNode, a throwaway one.

Used by the grader and the tests (a PrivateNode per grading run or test
session) and by `make local` (a lasting node under var/ when no broker
answers). Each node has its own
name, ports, data directory and Erlang cookie (HOME); it shares only epmd,
which nothing here ever stops.
"""

import os
import random
import re
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

from .processes import waited_for_cpu

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


LOWEST_PORT = 10000


def _ephemeral_ports():
    """The range the machine takes the source ports of its outgoing connections from."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A port free on 127.0.0.1 now, below the ephemeral range: one the machine's own outgoing
    connections never take, so it stays free until the program it is for binds it."""
    low, _ = _ephemeral_ports()
    if low <= LOWEST_PORT + 1000:  # (a machine that gives nearly every port to outgoing connections)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    while True:
        port = random.randrange(LOWEST_PORT, low)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


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


# RabbitMQ's own line in its log ("... [error] <0.230.0> Failed to ..."), not the indented
# lines of an Erlang report (crasher:, reductions:, neighbours: ...) that may follow it.
ERROR_LINE = re.compile(r"^\S+ \S+ \[error\] <[0-9.]+> (\S.*)$")
BANNER = ("BOOT FAILED", "===========")  # RabbitMQ's heading above its reason
BOOT_TRIES = 2  # a node that fails to boot is started afresh once (new ports, a new name)
STARVED_AFTER = 5  # a boot starved of CPU is given up after this many times its time limit


class PrivateNode:
    """start() returns at once; wait_ready() blocks until AMQP answers; stop() kills and removes it.

    The node has one user, an administrator with a random password (no
    guest), and the management API on a port of its own: the grader's
    sandbox makes a vhost and a user per submission through it. Read url and
    management_url after wait_ready(): a node that did not boot (a port taken
    meanwhile, a machine too busy) is started again on other ports, with
    another name and folder; `retried` holds why. A node that fails even
    then keeps its folder, and NodeError names its log.
    """

    USER = "nightjar-grader"

    def __init__(self, base=None, remove_if_orphaned=None):
        self.base = base
        self.password = secrets.token_urlsafe(18)
        self.process = None
        self.watchdog = None
        self.env = None  # rabbitmq-server's and rabbitmqctl's, from start()
        self.port = self.dist_port = None
        self.management_port = None
        self.retried = []  # why each boot that was tried again failed
        self._keep = False
        self._orphan_folder = remove_if_orphaned
        self._new_folder()

    def _new_folder(self):
        self.dir = Path(tempfile.mkdtemp(prefix="nightjar-grader-node-", dir=self.base))
        self.name = f"nightjar-grader-{os.getpid()}-{uuid.uuid4().hex[:6]}@localhost"
        self._remove_if_orphaned = Path(self._orphan_folder or self.dir)

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
        """Block until the node answers AMQP; a boot that fails is tried once more afresh.
        NodeError says why the last one failed, and where its log is (kept)."""
        for attempt in range(1, BOOT_TRIES + 1):
            try:
                return self._wait_ready(timeout)
            except NodeError as error:
                if attempt == BOOT_TRIES:
                    self._keep = True
                    self._kill()
                    if self.base is not None:  # out of the folder its user deletes when done
                        self.dir = Path(shutil.move(self.dir, Path(self.base).parent / self.dir.name))
                    raise NodeError(f"{error} (tried {BOOT_TRIES} times; its log: {self._log_path()},"
                                    f" its output: {self.dir / 'server.out'})") from None
                self.retried.append(str(error))
                self.stop()
                self._new_folder()
                self.start()

    def _wait_ready(self, timeout):
        """timeout: of the node's own time, as a worker's (processes.OwnClock): what a busy
        machine keeps it waiting for a CPU is not counted, up to STARVED_AFTER times it."""
        params = self._probe()
        start = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise NodeError(f"the private RabbitMQ node exited during start-up"
                                f" (status {self.process.returncode}): {self._reason()}")
            try:
                pika.BlockingConnection(params).close()
                return
            # Not up yet; a handshake that times out (pika raises it outside AMQPError) too.
            except (pika.exceptions.AMQPError, AMQPConnectorException, OSError):
                wall = time.monotonic() - start  # (its processes are new: all they waited is now)
                if wall > timeout and (wall - min(wall, self._waited()) > timeout
                                       or wall > STARVED_AFTER * timeout):
                    raise NodeError(f"the private RabbitMQ node did not accept connections within"
                                    f" {timeout:g} s: {self._reason()}") from None
                time.sleep(0.1)

    def _waited(self):
        """Seconds the node's processes waited for a CPU so far."""
        return sum(map(waited_for_cpu, [self.process.pid, *_descendants(self.process.pid)]))

    def _log_path(self):
        return self.dir / "log" / f"{self.name}.log"

    def _reason(self):
        """Why the node did not boot: RabbitMQ's own first error line in its log (or in what it
        printed), else the VM's last word, else the last lines it printed."""
        def lines(path):
            try:
                return path.read_text(errors="replace").splitlines()
            except OSError:
                return []

        printed = lines(self.dir / "server.out")
        errors = [found.group(1) for found in map(ERROR_LINE.match, lines(self._log_path()) + printed)
                  if found and found.group(1) not in BANNER]
        told = [line.strip() for line in printed if line.strip()]
        ended = [line for line in told if line.startswith("init terminating in do_boot")]
        return _middle_cut((errors or ended or [" / ".join(told[-3:])])[0]) or "no output"

    def ctl(self, *args, timeout=60):
        """rabbitmqctl on this node (after start()), e.g. ctl("set_vm_memory_high_watermark", "0.4");
        raises CalledProcessError when it fails."""
        return subprocess.run([find_tool("rabbitmqctl"), "-n", self.name, *args], env=self.env, cwd=self.dir,
                              capture_output=True, text=True, timeout=timeout, check=True)

    def restart(self):
        """Kill the node as a crash would, and start it again on the same ports and data."""
        self._kill()
        self.start(same_ports=True)._wait_ready(60)

    def stop(self):
        """Kill the node's processes, wait for them, delete its data (not the folder of a node
        that failed to boot: NodeError named its log). Safe to call twice."""
        self._kill()
        if not self._keep:
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


def _middle_cut(text, limit=400):
    """A long line of Erlang terms cut in the middle: its start and its end say the most."""
    if len(text) <= limit:
        return text
    return f"{text[:limit // 2 - 2]} … {text[-(limit // 2 - 1):]}"


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
