"""A container stack of its own for tests and benchmarks: make and Compose with
their own compose project name, free host ports and their own passwords.

Every Compose call goes through the project's one choice (nightjar/compose.py);
a Stack may name another Compose (v1 or v2) to run under. It may also run from
a bare checkout: a copy of the repository without .venv, whose `make` finds a
python3 that has only its standard library and cannot make a virtual
environment, as on a host that has only Docker, make and python3.

The base images are the ones `make base-images` builds from Debian packages
(built here when missing), RabbitMQ 4.0 from Debian 13 for the brokers,
unless NIGHTJAR_PYTHON_IMAGE and NIGHTJAR_RABBITMQ_IMAGE name others.
"""

import hashlib
import os
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

from nightjar import compose as choice
from nightjar.harness.rabbitnode import free_port

ROOT = Path(__file__).resolve().parents[1]
# What scripts/build-base-images tags: the stacks run on RabbitMQ 4.x, as compose.yaml's
# default does (the tests outside containers use the machine's RabbitMQ, 3.x here).
BASE_IMAGES = {"NIGHTJAR_PYTHON_IMAGE": "nightjar-base/python:3.11-bookworm",
               "NIGHTJAR_RABBITMQ_IMAGE": "nightjar-base/rabbitmq:4.0-trixie"}
# Its RabbitMQ 3.x stand-in, for the tests that compare the versions.
RABBITMQ_3_IMAGE = "nightjar-base/rabbitmq:3.10-bookworm"
# Its RabbitMQ 4.3 stand-in (Debian unstable's): compose.yaml's version, and the course's broker.
# A test that runs it calls ensure_built(RABBITMQ_4_3_IMAGE) first.
RABBITMQ_4_3_IMAGE = "nightjar-base/rabbitmq:4.3-sid"
# The host's python3 in a bare checkout: the standard library only (-S: no
# site-packages), and no venv or ensurepip.
BARE_PYTHON = """#!/bin/sh
case " $* " in
  *" -m venv "*|*" -m ensurepip "*) echo "python3: the venv module is not available on this host" >&2; exit 1;;
esac
exec {python} -S "$@"
"""


class Unavailable(Exception):
    """No stack can run here; the text says why."""


def cannot_run(reason):
    """A container test that cannot run here: skipped, or failed where CI requires the
    containers (NIGHTJAR_CONTAINER_TESTS=required)."""
    import pytest
    if os.environ.get("NIGHTJAR_CONTAINER_TESTS") == "required":
        pytest.fail(f"{reason} (NIGHTJAR_CONTAINER_TESTS=required)")
    pytest.skip(str(reason))


def require_engine():
    """Go on only where a Docker engine answers (see cannot_run)."""
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        cannot_run("no Docker engine answers ('docker info' failed)")


def run(command, env, input=None, timeout=600, cwd=ROOT):
    return subprocess.run(command, cwd=cwd, env=env, input=input, capture_output=True,
                          text=True, timeout=timeout)


def base_images(env):
    """The base images' settings, building the Debian ones when they are missing."""
    chosen = {name: os.environ[name] for name in BASE_IMAGES if os.environ.get(name)}
    if len(chosen) == len(BASE_IMAGES):
        return chosen
    ensure_built(*BASE_IMAGES.values(), env=env)
    return dict(BASE_IMAGES)


def ensure_built(*images, env=None):
    """Build the Debian base images (all of them, scripts/build-base-images) when one of `images`
    is missing, e.g. ensure_built(RABBITMQ_4_3_IMAGE); Unavailable where this cannot build them."""
    missing = [image for image in images if run(["docker", "image", "inspect", image], env).returncode != 0]
    if missing:
        if os.geteuid() != 0 or not shutil.which("debootstrap"):
            raise Unavailable(f"{', '.join(missing)} missing, and only root with debootstrap can build"
                              " it (sudo make base-images)")
        built = run(["scripts/build-base-images"], env, timeout=900)
        if built.returncode != 0:
            raise AssertionError(built.stdout + built.stderr)


def copy_checkout(checkout):
    """A copy of this checkout's files (tracked, and new ones not ignored): no .venv, no build output."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = checkout / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return checkout


def bare_checkout(folder):
    """A copy of this checkout and a folder holding the bare host's python3: (checkout, bin folder)."""
    checkout = copy_checkout(folder / "checkout")
    bin_folder = folder / "bin"
    bin_folder.mkdir()
    python3 = bin_folder / "python3"
    python3.write_text(BARE_PYTHON.format(python=shlex.quote(sys._base_executable)))
    python3.chmod(python3.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return checkout, bin_folder


class Stack:
    """The lab's stack under the compose project `project`, driven by `compose` (default: the
    project's choice), from `bare` (a folder for a bare checkout) or from this checkout."""

    def __init__(self, project, compose=None, bare=None):
        # One project name per checkout: two checkouts on one machine (and one Docker
        # engine) test side by side without removing each other's containers.
        project = f"{project}-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:6]}"
        self.project = project
        self.compose_command = list(compose or choice.choose())
        problem = choice.unusable(self.compose_command)
        if problem:
            raise Unavailable(f"{shlex.join(self.compose_command)}: {problem}")
        self.site_port, self.amqp_port, self.management_port = free_port(), free_port(), free_port()
        self.lab_port = free_port()
        self.user, self.password = "lab-" + secrets.token_hex(3), secrets.token_hex(12)
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(("NIGHTJAR_", "COMPOSE", "VIRTUAL_ENV"))}
        env.update(COMPOSE=shlex.join(self.compose_command),
                   COMPOSE_PROJECT_NAME=project, NIGHTJAR_SITE_PORT=str(self.site_port),
                   NIGHTJAR_LAB_PORT=str(self.lab_port),
                   NIGHTJAR_AMQP_PORT=str(self.amqp_port), NIGHTJAR_MANAGEMENT_PORT=str(self.management_port),
                   NIGHTJAR_RABBITMQ_USER=self.user, NIGHTJAR_RABBITMQ_PASSWORD=self.password,
                   NIGHTJAR_GRADER_RABBITMQ_PASSWORD=secrets.token_hex(12),
                   NIGHTJAR_SECRET_KEY=secrets.token_hex(16))
        env.update(base_images(env))
        self.root = ROOT
        if bare is not None:
            self.root, bin_folder = bare_checkout(bare)
            # The bare python3 first, and no virtual environment's bin folder.
            path = [entry for entry in env["PATH"].split(os.pathsep) if ".venv" not in Path(entry).parts]
            env["PATH"] = os.pathsep.join([str(bin_folder), *path])
        self.env = env
        self.url = f"http://127.0.0.1:{self.site_port}/"
        self.amqp_url = f"amqp://{self.user}:{self.password}@127.0.0.1:{self.amqp_port}/%2F"

    def make(self, *targets, input=None, **settings):
        return run(["make", "--no-print-directory", *targets], dict(self.env, **settings), input=input,
                   cwd=self.root)

    def compose(self, *args, input=None):
        return run([*self.compose_command, *args], self.env, input=input, cwd=self.root)

    def popen(self, *args, **options):
        """Compose started in the background (e.g. `exec -T workstation ...`)."""
        return subprocess.Popen([*self.compose_command, *args], cwd=self.root, env=self.env, **options)

    def workstation(self, *command, input=None):
        return self.compose("exec", "-T", "workstation", *command, input=input)

    def containers(self):
        return self.compose("ps", "-q").stdout.split()

    def remove(self, images=False):
        """Containers, volumes and networks (and the images built for it, when asked)."""
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5",
                     *(["--rmi", "local"] if images else []))

    def console_url(self, timeout=180):
        """The lab console's URL, as its log shows it on a line of its own (after `compose up`)."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.compose("logs", "--no-color", "console").stdout
            lines = [line.split("|", 1)[-1].strip() for line in shown.splitlines()]
            for before, line in zip(lines, lines[1:]):
                if before == "The lab console is ready. Open it in your browser:":
                    assert re.fullmatch(rf"http://127\.0\.0\.1:{self.lab_port}/\?token=[\w-]{{40,}}", line), line
                    return line
            assert time.monotonic() < deadline, f"the console's log shows no URL: {shown}"
            time.sleep(0.5)

    def up_transcript(self, console_url):
        """What `make up` prints when the lab starts."""
        return ("Building the lab's images (the first build takes a few minutes)...\n"
                "Starting RabbitMQ, the site, the Workstation, the lab console and the grader...\n"
                f"Lab console:         {console_url}\n"
                f"Nightjar site:       http://127.0.0.1:{self.site_port}/\n"
                f"RabbitMQ management: http://127.0.0.1:{self.management_port}/ (user {self.user};"
                " password: NIGHTJAR_RABBITMQ_PASSWORD in the environment)\n"
                "Workstation:         make shell (or the lab console's terminal)\n")
