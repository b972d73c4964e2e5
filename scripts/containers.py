#!/usr/bin/env python3
"""`make up`: start the lab's containers and return once the site answers.

    python3 scripts/containers.py up COMPOSE...     (e.g. `up docker-compose`)

Before anything starts it refuses credentials that would break the AMQP URLs
and host ports that are taken (one line naming the port and the setting to
change). A failing service is named in one line with how to see its log.
Settings come from the environment, else from .env, as Compose reads them.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `make up` runs with the machine's python3, no venv needed
from nightjar.harness.siteprobe import site_answers  # noqa: E402  (standard library only)
ENV_FILE = ROOT / ".env"
SAFE_CREDENTIAL = re.compile(r"[A-Za-z0-9_-]*")
CREDENTIALS = ("NIGHTJAR_RABBITMQ_USER", "NIGHTJAR_RABBITMQ_PASSWORD", "NIGHTJAR_GRADER_RABBITMQ_PASSWORD")
DEFAULT_USER = "nightjar"  # compose.yaml's default for NIGHTJAR_RABBITMQ_USER
# (setting, default, the service publishing it); the defaults are compose.yaml's.
PORTS = (("NIGHTJAR_SITE_PORT", 8000, "site"),
         ("NIGHTJAR_AMQP_PORT", 5672, "rabbitmq"),
         ("NIGHTJAR_MANAGEMENT_PORT", 15672, "rabbitmq"))
READY_SECONDS = 180  # a cold start builds images first; the clock starts after that


class Refused(Exception):
    """One line saying why the lab cannot start."""


def read_env_file(path=ENV_FILE):
    """KEY=VALUE lines of .env (comments and blank lines skipped, quotes removed)."""
    values = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return values
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, value = (part.strip() for part in line.split("=", 1))
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[name] = value
    return values


def settings(environ, env_file=ENV_FILE):
    """{name: (value, where)} as Compose sees them: the environment wins over .env."""
    found = {name: (value, ".env") for name, value in read_env_file(env_file).items()}
    found.update({name: (value, "the environment") for name, value in environ.items()
                  if name.startswith("NIGHTJAR_")})
    return found


def check_credentials(found):
    for name in CREDENTIALS:
        value, where = found.get(name, ("", ""))
        if not SAFE_CREDENTIAL.fullmatch(value):
            raise Refused(f"{name} in {where} has characters an AMQP URL cannot carry as they are"
                          " (use letters, digits, '-' and '_'). Nothing was started.")


def host_ports(found):
    """{setting: port}, each a valid and distinct port number."""
    ports = {}
    for name, default, _service in PORTS:
        value, where = found.get(name, ("", ""))
        if not value:
            ports[name] = default
            continue
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise Refused(f"{name}={value} in {where} is not a port number (1-65535). Nothing was started.")
        ports[name] = int(value)
    for name, port in ports.items():
        others = [other for other, theirs in ports.items() if theirs == port and other != name]
        if others:
            raise Refused(f"{name} and {others[0]} are both {port}: give each its own port. Nothing was started.")
    return ports


def is_free(port):
    with socket.socket() as probe:
        # As Docker binds: a closed connection's TIME_WAIT on the port does not count as taken.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def check_ports(ports, ours):
    """Refuse a taken port, unless the lab's own containers hold it."""
    for name, _default, _service in PORTS:
        port = ports[name]
        if port in ours or is_free(port):
            continue
        raise Refused(f"Port {port} on 127.0.0.1 is taken by another program: set {name} in .env"
                      " to a free port. Nothing was started.")


def published_ports(compose):
    """The host ports the lab's running containers publish now."""
    ids = subprocess.run([*compose, "ps", "-q"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not ids:
        return set()
    shown = subprocess.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", *ids],
                           capture_output=True, text=True).stdout
    return {int(port) for port in re.findall(r'"HostPort":"(\d+)"', shown)}


def compose_run(compose, *args):
    return subprocess.run([*compose, *args], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")


def why_up_failed(output, compose, ports):
    """One line for a failed `compose up`: the service, why, and how to see its log."""
    logs = f"Its log: {' '.join(compose)} logs SERVICE"
    build = re.search(r"Service '([\w-]+)' failed to build", output)
    if build:
        return f"{build.group(1)}: its image did not build (the end of the build's output is above)."
    for line in output.splitlines():
        failed = re.search(r"ERROR: for ([\w-]+)\s+(.*)", line)
        if not failed or re.search(r"_\d+$", failed.group(1)):
            continue  # compose v1 names each failure twice: container, then service
        service, reason = failed.groups()
        taken = re.search(r"(?:127\.0\.0\.1|0\.0\.0\.0):(\d+)", reason)
        if taken and ("already allocated" in reason or "address already in use" in reason):
            port = int(taken.group(1))
            setting = next((name for name, value in ports.items() if value == port), "its port setting")
            return f"{service}: port {port} on 127.0.0.1 is taken by another program: set {setting} in .env to a free port."
        if "unhealthy" in reason:
            return f"rabbitmq never became healthy, so {service} did not start. {logs.replace('SERVICE', 'rabbitmq')}"
        return f"{service} did not start: {reason.strip()}. {logs.replace('SERVICE', service)}"
    return f"{' '.join(compose)} up failed (its output is above). Logs: {' '.join(compose)} logs"


def service_state(compose, service):
    """(status, restart count) of a service's container, e.g. ('running', 0)."""
    ids = subprocess.run([*compose, "ps", "-q", service], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not ids:
        return "missing", 0
    shown = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", ids[0]],
                           capture_output=True, text=True).stdout.split()
    return (shown[0], int(shown[1])) if len(shown) == 2 else ("missing", 0)


def wait_for_site(compose, port):
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + READY_SECONDS
    restarted_before = service_state(compose, "site")[1]  # counts since the container was created
    while time.monotonic() < deadline:
        if site_answers(url):
            return
        status, restarts = service_state(compose, "site")
        if status in ("exited", "dead", "missing") or restarts > restarted_before:
            raise Refused(f"site stopped ({status}) before it answered. Its log: {' '.join(compose)} logs site")
        time.sleep(0.5)
    raise Refused(f"site did not answer at {url}healthz within {READY_SECONDS} s. Its log: {' '.join(compose)} logs site")


def up(compose, environ):
    if shutil.which(compose[0]) is None:
        raise Refused(f"{compose[0]} is not installed (apt-get install docker-compose), so nothing was"
                      " started; without it, run the lab with 'make local'.")
    found = settings(environ)
    check_credentials(found)
    ports = host_ports(found)
    check_ports(ports, published_ports(compose))
    print("Building the lab's images (the first build takes a few minutes)...", flush=True)
    built = compose_run(compose, "build")
    if built.returncode != 0:
        print("\n".join(built.stdout.splitlines()[-20:]), file=sys.stderr)  # the failing step
        raise Refused(why_up_failed(built.stdout, compose, ports))
    print("Starting RabbitMQ, the site and the Workstation...", flush=True)
    started = compose_run(compose, "up", "-d")
    if started.returncode != 0:
        raise Refused(why_up_failed(started.stdout, compose, ports))
    wait_for_site(compose, ports["NIGHTJAR_SITE_PORT"])
    user = found.get("NIGHTJAR_RABBITMQ_USER", ("", ""))[0] or DEFAULT_USER
    print(f"Nightjar site:       http://127.0.0.1:{ports['NIGHTJAR_SITE_PORT']}/")
    print(f"RabbitMQ management: http://127.0.0.1:{ports['NIGHTJAR_MANAGEMENT_PORT']}/"
          f" (user {user}; password: NIGHTJAR_RABBITMQ_PASSWORD in .env, default in .env.example)")
    print("Workstation:         make shell")


def main(argv):
    if len(argv) < 2 or argv[0] != "up":
        print("usage: containers.py up COMPOSE...   (e.g. containers.py up docker-compose)", file=sys.stderr)
        return 2
    try:
        up(argv[1:], os.environ)
    except Refused as refusal:
        print(refusal, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
