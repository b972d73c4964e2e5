"""`make up`'s refusals (scripts/containers.py): one line each, and nothing started.

These need no Docker engine: the checks run before Compose is asked to start
anything. The lab starting for real is tests/test_stack.py.
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


def make_up(**settings):
    """scripts/containers.py up, under a compose project no other test uses; (status, stdout, stderr)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("NIGHTJAR_")}
    env.update(settings, COMPOSE_PROJECT_NAME=f"nightjar-refusal-{uuid.uuid4().hex[:8]}")
    done = subprocess.run([sys.executable, "scripts/containers.py", "up", "docker-compose"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout, done.stderr


def test_a_password_that_would_break_the_amqp_url_is_refused():
    assert make_up(NIGHTJAR_RABBITMQ_PASSWORD="p@ss:word/1") == (1, "", (
        "NIGHTJAR_RABBITMQ_PASSWORD in the environment has characters an AMQP URL cannot carry as they are"
        " (use letters, digits, '-' and '_'). Nothing was started.\n"))


def test_a_taken_port_names_the_port_and_the_setting():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert make_up(NIGHTJAR_AMQP_PORT=str(port)) == (1, "", (
            f"Port {port} on 127.0.0.1 is taken by another program: set NIGHTJAR_AMQP_PORT in .env"
            " to a free port. Nothing was started.\n"))


@pytest.mark.parametrize("value", ["http", "0", "70000"])
def test_a_port_setting_that_is_no_port_is_refused(value):
    assert make_up(NIGHTJAR_SITE_PORT=value) == (1, "", (
        f"NIGHTJAR_SITE_PORT={value} in the environment is not a port number (1-65535). Nothing was started.\n"))


def test_two_settings_on_one_port_are_refused():
    assert make_up(NIGHTJAR_SITE_PORT="18080", NIGHTJAR_MANAGEMENT_PORT="18080") == (1, "", (
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


def test_a_port_clash_reported_by_compose_becomes_one_line():
    ports = {"NIGHTJAR_SITE_PORT": 8000, "NIGHTJAR_AMQP_PORT": 5672, "NIGHTJAR_MANAGEMENT_PORT": 15672}
    assert containers.why_up_failed(REAL_PORT_CLASH, ["docker-compose"], ports) == (
        "rabbitmq: port 5672 on 127.0.0.1 is taken by another program: set NIGHTJAR_AMQP_PORT in .env to a free port.")
