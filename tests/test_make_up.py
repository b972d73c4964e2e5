"""`make up`'s and `make shell`'s refusals (scripts/containers.py): one line each, and nothing started.

These need no Docker engine: the checks run before Compose is asked to start
anything, and stand-ins on PATH play the engine and Compose (there, missing or
too old). The lab starting for real is tests/test_stack.py.
"""

import os
import socket
import subprocess
import sys
import uuid

import pytest

from stackkit import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import containers  # noqa: E402

REAL_PORT_CLASH = """\
Recreating nj-dev_rabbitmq_1 ... error

ERROR: for nj-dev_rabbitmq_1  Cannot start service rabbitmq: driver failed programming external connectivity on endpoint nj-dev_rabbitmq_1 (5e18): Error starting userland proxy: listen tcp4 127.0.0.1:5672: bind: address already in use

ERROR: for rabbitmq  Cannot start service rabbitmq: driver failed programming external connectivity on endpoint nj-dev_rabbitmq_1 (5e18): Error starting userland proxy: listen tcp4 127.0.0.1:5672: bind: address already in use
Encountered errors while bringing up the project.
"""  # docker-compose 1.29.2 beside the machine's own RabbitMQ
REAL_PORT_CLASH_V2 = """\
 Container nj-dev-rabbitmq-1  Starting
Error response from daemon: driver failed programming external connectivity on endpoint nj-dev-rabbitmq-1 (9741c91db282): Error starting userland proxy: listen tcp4 127.0.0.1:5672: bind: address already in use
"""  # docker compose 2.40.3, the same


@pytest.fixture
def engine(tmp_path):
    """Stand-ins for a Docker engine with Compose v2, running no container."""
    return stand_ins(tmp_path / "engine", compose_v2="2.40.3")


def containers_py(command, path, **settings):
    """scripts/containers.py COMMAND with only the stand-ins at `path` on PATH, under a compose
    project no other test uses; (status, stdout, stderr)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("NIGHTJAR_", "COMPOSE"))}
    env.update(settings, COMPOSE_PROJECT_NAME=f"nightjar-refusal-{uuid.uuid4().hex[:8]}", PATH=str(path))
    done = subprocess.run([sys.executable, "scripts/containers.py", command], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def make_up(engine, **settings):
    return containers_py("up", engine, **settings)


def test_a_password_that_would_break_the_amqp_url_is_refused(engine):
    assert make_up(engine, NIGHTJAR_RABBITMQ_PASSWORD="p@ss:word/1") == (1, "", (
        "NIGHTJAR_RABBITMQ_PASSWORD in the environment has characters an AMQP URL cannot carry as they are"
        " (use letters, digits, '-' and '_'). Nothing was started.\n"))


@pytest.mark.parametrize("command", ["up", "shell"])
def test_a_taken_port_names_the_port_and_the_setting(engine, command):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert containers_py(command, engine, NIGHTJAR_AMQP_PORT=str(port)) == (1, "", (
            f"Port {port} on 127.0.0.1 is taken by another program: set NIGHTJAR_AMQP_PORT in .env"
            " to a free port. Nothing was started.\n"))


@pytest.mark.parametrize("value", ["http", "0", "70000"])
def test_a_port_setting_that_is_no_port_is_refused(engine, value):
    assert make_up(engine, NIGHTJAR_SITE_PORT=value) == (1, "", (
        f"NIGHTJAR_SITE_PORT={value} in the environment is not a port number (1-65535). Nothing was started.\n"))


def test_two_settings_on_one_port_are_refused(engine):
    assert make_up(engine, NIGHTJAR_SITE_PORT="18080", NIGHTJAR_MANAGEMENT_PORT="18080") == (1, "", (
        "NIGHTJAR_SITE_PORT and NIGHTJAR_MANAGEMENT_PORT are both 18080: give each its own port."
        " Nothing was started.\n"))


def test_dot_env_is_read_as_compose_reads_it_and_the_environment_wins(tmp_path):
    env_file = tmp_path / ".env"
    env_file.write_text("# lab settings\nNIGHTJAR_RABBITMQ_PASSWORD='se cret'\n\nNIGHTJAR_SITE_PORT=8001\n")
    found = containers.settings({"NIGHTJAR_SITE_PORT": "8002", "HOME": "/root"}, env_file)
    assert found == {"NIGHTJAR_RABBITMQ_PASSWORD": ("se cret", ".env"),
                     "NIGHTJAR_SITE_PORT": ("8002", "the environment")}
    with pytest.raises(containers.Refused, match=r"^NIGHTJAR_RABBITMQ_PASSWORD in \.env has characters"):
        containers.check_credentials(found)


@pytest.mark.parametrize("output, compose", [(REAL_PORT_CLASH, ["docker-compose"]),
                                             (REAL_PORT_CLASH_V2, ["docker", "compose"])], ids=["v1", "v2"])
def test_a_port_clash_reported_by_compose_becomes_one_line(output, compose):
    ports = {"NIGHTJAR_SITE_PORT": 8000, "NIGHTJAR_AMQP_PORT": 5672, "NIGHTJAR_MANAGEMENT_PORT": 15672}
    assert containers.why_up_failed(output, compose, ports) == (
        "rabbitmq: port 5672 on 127.0.0.1 is taken by another program: set NIGHTJAR_AMQP_PORT in .env to a free port.")


def test_an_unhealthy_broker_reported_by_compose_v2_becomes_one_line():
    output = " Container nj-dev-rabbitmq-1  Error\ndependency failed to start: container nj-dev-rabbitmq-1 is unhealthy\n"
    assert containers.why_up_failed(output, ["docker", "compose"], {}) == (
        "rabbitmq never became healthy, so the site and the Workstation did not start. Its log: docker compose logs rabbitmq")


# --------------------------------------------------------------------------
# No engine, no Compose, a Compose too old: stand-ins on PATH play them

def stand_ins(folder, docker_info=0, compose_v2=None, compose_v1=None):
    """A PATH holding only a `docker` (whose `info` exits docker_info, whose `compose` plugin prints
    version compose_v2 or is missing) and, when compose_v1 is given, a `docker-compose` of that version."""
    folder.mkdir()
    plugin = (f'[ "$2" = version ] && echo {compose_v2}; exit 0' if compose_v2
              else 'echo "docker: unknown command: docker compose" >&2; exit 1')
    scripts = {"docker": f"""#!/bin/sh
case "$1" in
  info) exit {docker_info};;
  compose) {plugin};;
  ps) exit 0;;
esac
exit 1
"""}
    if compose_v1:
        scripts["docker-compose"] = f"#!/bin/sh\n[ \"$1\" = version ] && echo {compose_v1}\nexit 0\n"
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return folder


@pytest.mark.parametrize("command", ["check", "up", "shell"])
@pytest.mark.parametrize("stand_in, line", [
    ({"docker_info": 1, "compose_v2": "2.40.3"},
     "No Docker engine answers ('docker info' failed): run the lab without containers with 'make local'."),
    ({},
     "Neither Docker Compose v2 ('docker compose') nor v1 ('docker-compose') is installed: install one,"
     " or run the lab without containers with 'make local'."),
    ({"compose_v1": "1.25.0"},
     "docker-compose 1.25.0 is too old for compose.yaml, which needs Compose 1.28 or later (or Compose v2,"
     " 'docker compose'): update it, or run the lab without containers with 'make local'."),
], ids=["no-engine", "no-compose", "compose-too-old"])
def test_without_a_usable_engine_or_compose_one_line_says_so(tmp_path, command, stand_in, line):
    # Checked first: a learner without Docker hears of make local before any setting.
    assert containers_py(command, stand_ins(tmp_path / "bin", **stand_in)) == (1, "", line + "\n")


def test_the_compose_choice_prefers_v2_and_can_be_overridden(tmp_path):
    both = stand_ins(tmp_path / "both", compose_v2="2.40.3", compose_v1="1.29.2")
    only_v1 = stand_ins(tmp_path / "v1", compose_v1="1.29.2")
    assert containers_py("compose", both) == (0, "docker compose\n", "")
    assert containers_py("compose", only_v1) == (0, "docker-compose\n", "")
    assert containers_py("compose", both, COMPOSE="docker-compose") == (0, "docker-compose\n", "")


@pytest.mark.parametrize("found, told", [
    ({}, "user nightjar; password nightjar-lab: compose.yaml's default, as nothing sets"
         " NIGHTJAR_RABBITMQ_PASSWORD (see .env.example)"),
    ({"NIGHTJAR_RABBITMQ_PASSWORD": ("s3cret", ".env")}, "user nightjar; password: NIGHTJAR_RABBITMQ_PASSWORD in .env"),
    ({"NIGHTJAR_RABBITMQ_USER": ("ops", "the environment"),
      "NIGHTJAR_RABBITMQ_PASSWORD": ("s3cret", "the environment")},
     "user ops; password: NIGHTJAR_RABBITMQ_PASSWORD in the environment"),
], ids=["defaults", "dot-env", "environment"])
def test_make_up_names_where_the_management_password_comes_from(found, told):
    assert containers.management_line(found, 15672) == f"RabbitMQ management: http://127.0.0.1:15672/ ({told})"
