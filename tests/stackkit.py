"""A container stack of its own for tests and benchmarks: make and compose with
their own compose project name, free host ports and their own passwords.

The base images are the ones `make base-images` builds from Debian packages
(built here when missing), unless NIGHTJAR_PYTHON_IMAGE and
NIGHTJAR_RABBITMQ_IMAGE name others.
"""

import os
import secrets
import shutil
import subprocess
from pathlib import Path

from nightjar.harness.rabbitnode import free_port

ROOT = Path(__file__).resolve().parents[1]
# What scripts/build-base-images tags.
BASE_IMAGES = {"NIGHTJAR_PYTHON_IMAGE": "nightjar-base/python:3.11-bookworm",
               "NIGHTJAR_RABBITMQ_IMAGE": "nightjar-base/rabbitmq:3.10-bookworm"}


class Unavailable(Exception):
    """No stack can run here; the text says why."""


def run(command, env, input=None, timeout=600):
    return subprocess.run(command, cwd=ROOT, env=env, input=input, capture_output=True,
                          text=True, timeout=timeout)


def base_images(env):
    """The base images' settings, building the Debian ones when they are missing."""
    chosen = {name: os.environ[name] for name in BASE_IMAGES if os.environ.get(name)}
    if len(chosen) == len(BASE_IMAGES):
        return chosen
    missing = [image for image in BASE_IMAGES.values()
               if run(["docker", "image", "inspect", image], env).returncode != 0]
    if missing:
        if os.geteuid() != 0 or not shutil.which("debootstrap"):
            raise Unavailable("the base images are missing and only root with debootstrap can build"
                              " them (sudo make base-images)")
        built = run(["scripts/build-base-images"], env, timeout=900)
        if built.returncode != 0:
            raise AssertionError(built.stdout + built.stderr)
    return dict(BASE_IMAGES)


class Stack:
    """The lab's stack under the compose project `project`."""

    def __init__(self, project):
        if shutil.which("docker") is None or run(["docker", "info"], dict(os.environ), timeout=30).returncode:
            raise Unavailable("no Docker engine answers ('docker info' failed); make test starts one"
                              " where dockerd is installed")
        if shutil.which("docker-compose") is None:
            raise Unavailable("docker-compose is not installed (apt-get install docker-compose)")
        self.site_port, self.amqp_port, self.management_port = free_port(), free_port(), free_port()
        self.user, self.password = "lab-" + secrets.token_hex(3), secrets.token_hex(12)
        env = {name: value for name, value in os.environ.items() if not name.startswith(("NIGHTJAR_", "COMPOSE_"))}
        env.update(COMPOSE_PROJECT_NAME=project, NIGHTJAR_SITE_PORT=str(self.site_port),
                   NIGHTJAR_AMQP_PORT=str(self.amqp_port), NIGHTJAR_MANAGEMENT_PORT=str(self.management_port),
                   NIGHTJAR_RABBITMQ_USER=self.user, NIGHTJAR_RABBITMQ_PASSWORD=self.password,
                   NIGHTJAR_GRADER_RABBITMQ_PASSWORD=secrets.token_hex(12),
                   NIGHTJAR_SECRET_KEY=secrets.token_hex(16))
        env.update(base_images(env))
        self.env = env
        self.url = f"http://127.0.0.1:{self.site_port}/"
        self.amqp_url = f"amqp://{self.user}:{self.password}@127.0.0.1:{self.amqp_port}/%2F"

    def make(self, *targets, input=None, **settings):
        return run(["make", "--no-print-directory", *targets], dict(self.env, **settings), input=input)

    def compose(self, *args, input=None):
        return run(["docker-compose", *args], self.env, input=input)

    def workstation(self, *command, input=None):
        return self.compose("exec", "-T", "workstation", *command, input=input)

    def containers(self):
        return self.compose("--profile", "grader", "ps", "-q").stdout.split()

    def remove(self, images=False):
        """Containers, volumes and networks (and the images built for it, when asked)."""
        self.compose("--profile", "grader", "down", "--volumes", "--remove-orphans", "--timeout", "5",
                     *(["--rmi", "local"] if images else []))

    def up_transcript(self):
        """What `make up` prints when the lab starts."""
        return ("Building the lab's images (the first build takes a few minutes)...\n"
                "Starting RabbitMQ, the site and the Workstation...\n"
                f"Nightjar site:       http://127.0.0.1:{self.site_port}/\n"
                f"RabbitMQ management: http://127.0.0.1:{self.management_port}/ (user {self.user};"
                " password: NIGHTJAR_RABBITMQ_PASSWORD in .env, default in .env.example)\n"
                "Workstation:         make shell\n")
