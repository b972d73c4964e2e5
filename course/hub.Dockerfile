# The course's JupyterHub with its proxy (configurable-http-proxy), DockerSpawner and
# SwarmSpawner, the idle culler, NativeAuthenticator and ltiauthenticator (course/requirements-hub.txt), and the
# lab's course/, nightjar/ and grader/ packages its configuration and the course's service
# (course/service.py, the same image) import. configurable-http-proxy 5
# needs Node 20, which Debian 13 packages.
ARG DEBIAN_IMAGE=debian:trixie-slim
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
# The CA bundle of the lab's Python image: the one its pip already trusts.
FROM ${PYTHON_IMAGE} AS python-image
FROM ${DEBIAN_IMAGE}

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_BREAK_SYSTEM_PACKAGES=1
# Unpinned apt packages: the Debian release (trixie) fixes their versions.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-pip nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=python-image /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
RUN npm install --global --no-audit --no-fund configurable-http-proxy@5.3.0 \
 && npm cache clean --force

COPY pyproject.toml course/requirements-hub.txt /srv/nightjar/course/
RUN python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/srv/nightjar/course/pyproject.toml', 'rb'))['project']['dependencies']))" >> /srv/nightjar/course/requirements-hub.txt \
 && pip install --no-cache-dir -r /srv/nightjar/course/requirements-hub.txt
COPY nightjar/ /srv/nightjar/nightjar/
COPY grader/ /srv/nightjar/grader/
COPY course/ /srv/nightjar/course/
# The units' starting handler.py, for the instructor's close-up of a learner (course/closeup.py).
COPY scenarios/units/ /srv/nightjar/scenarios/units/
COPY scenarios/unit2-ack-after-commit/solution/handler.py /srv/nightjar/scenarios/unit2-ack-after-commit/solution/
COPY ticket-desk/handler.py /srv/nightjar/ticket-desk/
ENV PYTHONPATH=/srv/nightjar
WORKDIR /srv/jupyterhub
EXPOSE 8000 8081
CMD ["jupyterhub", "--config", "/srv/nightjar/course/jupyterhub_config.py"]
