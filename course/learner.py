"""One learner's lab in one container: the Workstation's agent, the Nightjar site, the lab console.

    python3 /app/course/learner.py      (the learner image's command; course/learner.Dockerfile)

The hub's spawner starts the container with the JUPYTERHUB_* variables of a
single-user server and the learner's own NIGHTJAR_AMQP_URL (their vhost on
the course's RabbitMQ). The console is that single-user server; the site
listens on the container's loopback only, under PREFIX/site, and the
console relays it behind the hub's login. When one of the three ends, the
others are stopped and the container ends with its status: the hub starts
a fresh one, on the same volume, at the learner's next visit.
"""

import os
import signal
import sys
import time
from urllib.parse import unquote_to_bytes

PYTHON = sys.executable


def programs(environ):
    prefix = "/" + environ["JUPYTERHUB_SERVICE_PREFIX"].strip("/") + "/"
    return {
        "the Workstation's agent": [PYTHON, "-m", "nightjar_console.agent",
                                    "--socket", environ["NIGHTJAR_CONSOLE_SOCKET"]],
        "the Nightjar site": [PYTHON, "-m", "nightjar_site"],
        "the lab console": [PYTHON, "-m", "nightjar_console"],
    }, {"NIGHTJAR_SITE_PREFIX": wsgi_path(prefix) + "site"}


def wsgi_path(url_path):
    """A URL's path as waitress compares it with its url_prefix: unquoted, its bytes as latin-1
    (WSGI's way), so that a hub name such as zoë.lee@example.org finds its site."""
    return unquote_to_bytes(url_path).decode("latin-1")


def main():
    commands, extra = programs(os.environ)
    environment = {**os.environ, **extra}
    # os.posix_spawn, not subprocess: this process stays at the interpreter's own few MiB.
    started = {os.posix_spawn(command[0], command, environment): name
               for name, command in commands.items()}
    stopping = []

    def stop(signum, frame):
        stopping.append(signum)
        for pid in started:
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    ended_name, status = None, 0
    while ended_name is None:
        pid, wait_status = os.wait()
        if pid in started:
            ended_name, status = started.pop(pid), os.waitstatus_to_exitcode(wait_status)
    if stopping:
        status = 0  # the hub stopped the lab
    else:
        print(f"{ended_name} ended (status {status}); stopping the lab.", flush=True)
        stop(None, None)
    deadline = time.monotonic() + 10
    while started and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            started.pop(pid, None)
        else:
            time.sleep(0.1)
    for pid in started:
        os.kill(pid, signal.SIGKILL)
    return 0 if stopping and stopping[0] is not None else (status if status > 0 else 1)


if __name__ == "__main__":
    sys.exit(main())
