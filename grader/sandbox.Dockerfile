# The grader for a user with a Docker engine but no root (python3 -m grader
# --sandbox docker): the same grader and the same sandbox as the Linux route,
# run as root inside a container with no network, a read-only root and the
# class folder mounted read-only (grader/in_docker.py). It grades on a private
# RabbitMQ node of its own, so the image carries RabbitMQ too.
# Built from the repository root:
#   docker build -f grader/sandbox.Dockerfile .
# The base image is a setting: NIGHTJAR_PYTHON_IMAGE (see compose.yaml).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive

# RabbitMQ for the private grading node; util-linux for the sandbox (nsenter,
# setpriv, prlimit). Unpinned: the Debian release fixes their versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends rabbitmq-server util-linux \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies first, read from pyproject.toml (the one list of versions).
COPY pyproject.toml ./
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; print('\n'.join(p['dependencies']))" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY nightjar/ nightjar/
COPY grader/ grader/
COPY ticket-desk/handler.py ticket-desk/worker.py ticket-desk/desk.py ticket-desk/common.py ticket-desk/
ENV PYTHONPATH=/app

# Root inside the container: the sandbox it sets up for each submission needs it.
# hadolint ignore=DL3002
USER root
ENTRYPOINT ["python3", "-m", "grader"]
