"""Which Docker Compose drives the container lab, and whether that lab runs now.

One choice for every Compose call (the Makefile, scripts/containers.py, the
unit scripts and the tests): COMPOSE when it is set (e.g.
COMPOSE=docker-compose), else Compose v2 (`docker compose`) when it answers,
else v1 (`docker-compose`). Standard library only: on the container route
the host needs no virtual environment.
"""

import os
import re
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # where compose.yaml is
V2 = ("docker", "compose")
V1 = ("docker-compose",)
# The oldest Compose that reads compose.yaml: v1 learnt its `profiles` in 1.28.
OLDEST = (1, 28)
NO_ENGINE = "No Docker engine answers ('docker info' failed): run the lab without containers with 'make local'."


def run(command, environ=None, timeout=60):
    """(status, stdout) of a command run in the repository; (None, '') when it cannot start."""
    try:
        done = subprocess.run(list(command), cwd=ROOT, env=environ, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None, ""
    return done.returncode, done.stdout


def choose(environ=None):
    """The Compose command, as a list: COMPOSE, else v2 when it answers, else v1."""
    environ = os.environ if environ is None else environ
    if environ.get("COMPOSE", "").strip():
        return shlex.split(environ["COMPOSE"])
    return list(V2 if version(V2) else V1)


def version(compose):
    """Compose's version as numbers, e.g. (2, 40, 3); None when it does not answer."""
    status, shown = run([*compose, "version", "--short"], timeout=30)
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", shown)
    return tuple(int(part) for part in found.groups()) if status == 0 and found else None


def engine_answers():
    return run(["docker", "info"], timeout=30)[0] == 0


def unusable(compose, environ=None):
    """One line saying why the lab cannot run in containers here (no engine, no Compose, or
    one too old); None when it can."""
    environ = os.environ if environ is None else environ
    if not engine_answers():
        return NO_ENGINE
    found = version(compose)
    name = " ".join(compose)
    if found is None:
        if environ.get("COMPOSE", "").strip():
            return (f"COMPOSE={name} does not answer ('{name} version' failed): set COMPOSE to a Docker"
                    " Compose, or run the lab without containers with 'make local'.")
        return ("Neither Docker Compose v2 ('docker compose') nor v1 ('docker-compose') is installed:"
                " install one, or run the lab without containers with 'make local'.")
    if found < OLDEST:
        needed = ".".join(map(str, OLDEST))
        return (f"{name} {'.'.join(map(str, found))} is too old for compose.yaml, which needs Compose"
                f" {needed} or later (or Compose v2, 'docker compose'): update it, or run the lab"
                " without containers with 'make local'.")
    return None


def lab_runs(compose=None, environ=None):
    """True when this checkout's container lab has its Workstation running (after `make up`)."""
    # A quick look first: with no Compose Workstation running at all, Compose need not be asked.
    status, running = run(["docker", "ps", "-q", "--filter", "label=com.docker.compose.service=workstation"],
                           timeout=30)
    if status != 0 or not running.strip():
        return False
    compose = compose or choose(environ)
    status, services = run([*compose, "ps", "--services", "--filter", "status=running"], environ)
    return status == 0 and "workstation" in services.split()
