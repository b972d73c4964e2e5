# One learner's whole lab in one container, for a course (course/jupyterhub_config.py):
# the Workstation (its shell, through the console's agent), the learner's Nightjar site
# and the lab console, which is the hub's single-user server for that learner
# (course/learner.py starts the three). The learner's volume is /home/labex/project:
# ticket-desk/ (handler.py) and the live database, kept when the lab stops.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --gid 1000 labex \
 && useradd --uid 1000 --gid labex --create-home --shell /bin/bash labex \
 && install -d -o labex -g labex /home/labex/project /home/labex/project/ticket-desk \
      /home/labex/project/.lab \
 && install -d -m 0700 -o labex -g labex /run/nightjar-console

WORKDIR /app

# The lab, the site and the console, and JupyterHub's package for the hub's login (hub.py).
COPY pyproject.toml ./
COPY course/requirements-hub.txt course/
RUN python3 -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; o = p['optional-dependencies']; print('\n'.join(p['dependencies'] + o['site'] + o['console']))" > /tmp/requirements.txt \
 && grep '^jupyterhub==' course/requirements-hub.txt >> /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY nightjar/ nightjar/
COPY scenarios/ scenarios/
COPY nightjar-site/nightjar_site/ nightjar-site/nightjar_site/
COPY lab-console/nightjar_console/ lab-console/nightjar_console/
COPY course/learner.py course/
COPY ticket-desk/handler.py ticket-desk/worker.py ticket-desk/desk.py ticket-desk/common.py ticket-desk/
# Compiled once here, not by every start: PYTHONDONTWRITEBYTECODE keeps Python from saving it.
RUN python3 -m compileall -q /app
ENV PYTHONPATH=/app:/app/lab-console:/app/nightjar-site \
    NIGHTJAR_DB=/home/labex/project/.lab/nightjar.db \
    NIGHTJAR_WORKSTATION=/home/labex/project/ticket-desk \
    NIGHTJAR_CONSOLE_DATA=/home/labex/project/.lab/console \
    NIGHTJAR_CONSOLE_SOCKET=/run/nightjar-console/terminal.sock \
    NIGHTJAR_SITE_HOST=127.0.0.1 \
    NIGHTJAR_SITE_PORT=8000 \
    NIGHTJAR_SITE_CPU=any \
    NIGHTJAR_SITE_THREADS=4

WORKDIR /home/labex/project/ticket-desk
COPY --chown=labex:labex ticket-desk/handler.py ticket-desk/worker.py ticket-desk/desk.py ticket-desk/common.py ./

USER 1000:1000
EXPOSE 8888
CMD ["python3", "-S", "/app/course/learner.py"]
