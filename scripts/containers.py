#!/usr/bin/env python3
"""The lab in containers, from the host: `make up`, `make shell`, `make grade` and the checks make asks.

    python3 scripts/containers.py up | shell | grade | check | running | compose

up       refuses, before anything starts, credentials that would break the
         AMQP URLs and host ports that are taken (one line naming the port and
         the setting to change); builds the images quietly, starts the lab and
         returns once the site answers, saying where everything is. A failing
         service is named in one line with how to see its log.
shell    the same refusals, then a shell in the Workstation (started if need be).
grade    asks the grader's service (compose.yaml's `grader`, the one the lab
         console's Grade button asks), which grades against the grader's own
         RabbitMQ, on a network of its own; starts them when they are not running.
check    one line, and status 1, when no Docker engine answers or Compose is
         missing or too old for compose.yaml.
running  status 0 while the lab runs in containers (its Workstation is up).
compose  the Compose command every call uses (nightjar/compose.py chooses it).

Standard library only: the host needs no virtual environment. Settings come
from the environment, else from .env, as Compose reads them.
"""

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the machine's python3, no venv: these two are standard library only
from nightjar import compose as choice  # noqa: E402
from nightjar.harness.siteprobe import site_answers  # noqa: E402
ENV_FILE = ROOT / ".env"
SAFE_CREDENTIAL = re.compile(r"[A-Za-z0-9_-]*")
CREDENTIALS = ("NIGHTJAR_RABBITMQ_USER", "NIGHTJAR_RABBITMQ_PASSWORD", "NIGHTJAR_GRADER_RABBITMQ_PASSWORD")
# (setting, default, the service publishing it); the defaults are compose.yaml's.
PORTS = (("NIGHTJAR_LAB_PORT", 8080, "console"),
         ("NIGHTJAR_SITE_PORT", 8000, "site"),
         ("NIGHTJAR_AMQP_PORT", 5672, "rabbitmq"),
         ("NIGHTJAR_MANAGEMENT_PORT", 15672, "rabbitmq"))
READY_SECONDS = 180  # a cold start builds images first; the clock starts after that
SERVICES = "rabbitmq|site|workstation|console|grader-broker|grader"  # compose.yaml's, as a pattern
BUILD_LINE_AFTER = 3  # seconds: a build that takes longer (not just a look at the cache) gets a line
# What Compose prints on stderr when `up` starts the grader: not the learner's business.
COMPOSE_PROGRESS = re.compile(r"^(\x1b\[[0-9;]*[A-Za-z])*(\s*Container \S+ +|)(Creating|Created|Starting|Started|Recreat\w*|Waiting|Healthy|Running)\b")
# The grader's service inside its container (compose.yaml's grader command).
GRADING_SERVICE = "http://127.0.0.1:8090/"


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


def compose_default(name):
    """compose.yaml's default for a setting (its ${NAME:-default})."""
    found = re.search(r"\$\{" + name + r":-([^}]*)\}", (ROOT / "compose.yaml").read_text(encoding="utf-8"))
    return found.group(1) if found else ""


def management_line(found, port):
    """Where the management UI answers, its user, and where its password really comes from."""
    user = found.get("NIGHTJAR_RABBITMQ_USER", ("", ""))[0] or compose_default("NIGHTJAR_RABBITMQ_USER")
    password, where = found.get("NIGHTJAR_RABBITMQ_PASSWORD", ("", ""))
    if password:
        told = f"user {user}; password: NIGHTJAR_RABBITMQ_PASSWORD in {where}"
    else:
        told = (f"user {user}; password {compose_default('NIGHTJAR_RABBITMQ_PASSWORD')}: compose.yaml's"
                " default, as nothing sets NIGHTJAR_RABBITMQ_PASSWORD (see .env.example)")
    return f"RabbitMQ management: http://127.0.0.1:{port}/ ({told})"


def published_ports(compose):
    """The host ports the lab's running containers publish now."""
    ids = choice.run([*compose, "ps", "-q"])[1].split()
    if not ids:
        return set()
    shown = choice.run(["docker", "inspect", "-f", "{{json .NetworkSettings.Ports}}", *ids])[1]
    return {int(port) for port in re.findall(r'"HostPort":"(\d+)"', shown)}


def compose_run(compose, *args):
    return subprocess.run([*compose, *args], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace")


def why_up_failed(output, compose, ports):
    """One line for a failed `compose up` (v1 or v2): the service, why, and how to see its log."""
    logs = f"Its log: {' '.join(compose)} logs SERVICE"
    build = re.search(r"Service '([\w-]+)' failed to build", output)
    if build:
        return f"{build.group(1)}: its image did not build (the end of the build's output is above)."
    for line in output.splitlines():
        # v1: "ERROR: for SERVICE  reason" (and once more for the container, PROJECT_SERVICE_1);
        # v2: "Error response from daemon: ... endpoint PROJECT-SERVICE-1 (...): reason",
        # "dependency failed to start: container PROJECT-rabbitmq-1 is unhealthy".
        failed = (re.search(r"ERROR: for ([\w-]+)\s+(.*)", line)
                  or re.search(rf"Error response from daemon: .*endpoint \S*?[-_]({SERVICES})[-_]\d+ (.*)", line)
                  or re.search(rf"dependency failed to start: container \S*?[-_]({SERVICES})[-_]\d+ (is unhealthy)", line))
        if not failed or re.search(r"_\d+$", failed.group(1)):
            continue
        service, reason = failed.groups()
        taken = re.search(r"(?:127\.0\.0\.1|0\.0\.0\.0):(\d+)", reason)
        if taken and ("already allocated" in reason or "address already in use" in reason):
            port = int(taken.group(1))
            setting = next((name for name, value in ports.items() if value == port), "its port setting")
            return f"{service}: port {port} on 127.0.0.1 is taken by another program: set {setting} in .env to a free port."
        if "unhealthy" in reason:  # v1 names the service that waited, v2 the unhealthy one
            waited = "the site and the Workstation" if service == "rabbitmq" else service
            return f"rabbitmq never became healthy, so {waited} did not start. {logs.replace('SERVICE', 'rabbitmq')}"
        return f"{service} did not start: {reason.strip()}. {logs.replace('SERVICE', service)}"
    last = (output.strip().splitlines() or ["no output"])[-1]
    return f"{' '.join(compose)} up failed ({last}). Logs: {' '.join(compose)} logs"


def inspect(compose, service, template):
    """What `docker inspect -f TEMPLATE` says of a service's container ('' when there is none)."""
    ids = choice.run([*compose, "ps", "-q", service])[1].split()
    return choice.run(["docker", "inspect", "-f", template, ids[0]])[1].strip() if ids else ""


def service_state(compose, service):
    """(status, restart count) of a service's container, e.g. ('running', 0)."""
    shown = inspect(compose, service, "{{.State.Status}} {{.RestartCount}}").split()
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


def refuse_unusable(compose):
    problem = choice.unusable(compose)
    if problem:
        raise Refused(problem)


def refuse_bad_settings(compose, environ):
    """make up's refusals (credentials, ports), before anything starts; the settings and ports found."""
    found = settings(environ)
    check_credentials(found)
    ports = host_ports(found)
    check_ports(ports, published_ports(compose))
    return found, ports


def up(compose, environ):
    refuse_unusable(compose)
    found, ports = refuse_bad_settings(compose, environ)
    print("Building the lab's images (the first build takes a few minutes)...", flush=True)
    # The brokers' image is not built: they boot (seconds) while the build runs (a second, from the cache).
    brokers = subprocess.Popen([*compose, "up", "-d", "rabbitmq", "grader-broker"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    built = compose_run(compose, "build")
    brokers_output = brokers.communicate()[0]
    if built.returncode != 0:
        print("\n".join(built.stdout.splitlines()[-20:]), file=sys.stderr)  # the failing step
        raise Refused(why_up_failed(built.stdout, compose, ports))
    if brokers.returncode != 0:
        raise Refused(why_up_failed(brokers_output, compose, ports))
    print("Starting RabbitMQ, the site, the Workstation, the lab console and the grader...", flush=True)
    started = compose_run(compose, "up", "-d")
    if started.returncode != 0:
        raise Refused(why_up_failed(started.stdout, compose, ports))
    wait_for_site(compose, ports["NIGHTJAR_SITE_PORT"])
    print(f"Lab console:         {console_url(compose)}")
    print(f"Nightjar site:       http://127.0.0.1:{ports['NIGHTJAR_SITE_PORT']}/")
    print(management_line(found, ports["NIGHTJAR_MANAGEMENT_PORT"]))
    print("Workstation:         make shell (or the lab console's terminal)")


def console_url(compose):
    """The console's address with its token, as its log shows it (made on its first start)."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        status, output = choice.run([*compose, "exec", "-T", "console", "python3", "-m", "nightjar_console", "url"])
        if status == 0 and output.strip():
            return output.strip()
        if time.monotonic() > deadline:
            raise Refused(f"console did not answer. Its log: {' '.join(compose)} logs console")
        time.sleep(0.5)


def shell(compose, environ):
    """A shell in the Workstation's ticket-desk folder; refuses what `make up` refuses, before starting it."""
    refuse_unusable(compose)
    _found, ports = refuse_bad_settings(compose, environ)
    if service_state(compose, "workstation")[0] != "running":
        print("Starting RabbitMQ and the Workstation (make up starts the whole lab)...", flush=True)
        started = compose_run(compose, "up", "-d", "workstation")
        if started.returncode != 0:
            raise Refused(why_up_failed(started.stdout, compose, ports))
    os.chdir(ROOT)
    os.execvp(compose[0], [*compose, "exec", "workstation", "bash"])


def start_grader(compose):
    """The grader's service and its RabbitMQ, started when `make up` did not (or they stopped)."""
    if inspect(compose, "grader", "{{.State.Status}}") == "running" and grading_service_answers(compose):
        return
    print("Starting the grader and its own RabbitMQ (they keep running for the next gradings)...", flush=True)
    started = compose_run(compose, "up", "-d", "grader")
    if started.returncode != 0:
        last = (started.stdout.strip().splitlines() or ["no output"])[-1]
        raise Refused(f"the grader did not start ({last}). Its log: {' '.join(compose)} logs grader grader-broker")
    deadline = time.monotonic() + READY_SECONDS
    while not grading_service_answers(compose):
        if time.monotonic() > deadline:
            raise Refused(f"the grader did not answer. Its log: {' '.join(compose)} logs grader")
        time.sleep(0.5)


def grading_service_answers(compose):
    probe = ("import urllib.request; urllib.request.urlopen('" + GRADING_SERVICE + "healthz', timeout=2)")
    return choice.run([*compose, "exec", "-T", "grader", "python3", "-c", probe])[0] == 0


def grade(compose):
    """The grader's verdict on the Workstation's handler.py; its exit status."""
    # Each Compose call costs a second under v1: a running grader is asked at once
    # (--ask waits while its service starts listening).
    if inspect(compose, "grader", "{{.State.Status}}") != "running":
        refuse_unusable(compose)
        start_grader(compose)
    grading = subprocess.Popen([*compose, "exec", "-T", "grader", "python3", "-m", "grader.service",
                                "--ask", GRADING_SERVICE], cwd=ROOT,
                               stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    shown = threading.Thread(target=show_errors, args=(grading.stderr,))
    shown.start()
    try:
        status = grading.wait()
    except KeyboardInterrupt:
        grading.wait()
        status = 130
    shown.join()
    return status


def show_errors(stream):
    """The grader's stderr, less Compose's own lines about starting containers."""
    for line in stream:
        if not COMPOSE_PROGRESS.match(line):
            sys.stderr.write(line)
            sys.stderr.flush()


COMMANDS = {"up", "shell", "grade", "check", "running", "compose"}


def main(argv):
    if len(argv) != 1 or argv[0] not in COMMANDS:
        print(f"usage: containers.py {' | '.join(sorted(COMMANDS))}", file=sys.stderr)
        return 2
    command = argv[0]
    compose = choice.choose()
    if command == "compose":
        print(shlex.join(compose))
        return 0
    if command == "running":
        return 0 if choice.lab_runs(compose) else 1
    try:
        if command == "check":
            refuse_unusable(compose)
        elif command == "grade":
            return grade(compose)
        elif command == "shell":
            shell(compose, os.environ)
        else:
            up(compose, os.environ)
    except Refused as refusal:
        print(refusal, file=sys.stderr)
        return 2 if command == "grade" else 1  # the grader's own status for "cannot grade"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
