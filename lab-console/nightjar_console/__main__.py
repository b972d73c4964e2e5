"""python3 -m nightjar_console [url]

Serves the lab console on NIGHTJAR_CONSOLE_HOST:NIGHTJAR_CONSOLE_PORT
(default 127.0.0.1:8080; containers listen on 0.0.0.0 and publish the port
on the host's 127.0.0.1 only) and prints its URL, token included, on a line
of its own. `url` prints that URL and exits (make up shows it).

Settings (environment):
  NIGHTJAR_CONSOLE_DATA     its folder: the token and the units passed (default var/console)
  NIGHTJAR_CONSOLE_SOCKET   the Workstation agent's socket (default: in that folder)
  NIGHTJAR_WORKSTATION      the Workstation folder, whose handler.py the editor opens
  NIGHTJAR_CONSOLE_GRADER   the grading service's URL (containers); empty: the local grader
  NIGHTJAR_LAB_PORT         the host port the URL names (default: the port it listens on)
  NIGHTJAR_SITE_PORT, NIGHTJAR_MANAGEMENT_PORT   where the page's links point
                            (NIGHTJAR_MANAGEMENT_PORT=none: no management UI; the page says so)
  NIGHTJAR_CONSOLE_SOLUTIONS  off: no "Show the solution" nor "Solve unit N" (a graded course)
  NIGHTJAR_CONSOLE_ORIGINS  more Origins to accept, comma-separated (a forwarded port)
  NIGHTJAR_CONSOLE_TOKEN    a token to use instead of the stored one

Started by a JupyterHub spawner (JUPYTERHUB_API_TOKEN and JUPYTERHUB_SERVICE_PREFIX set: a
course, course/), it is that learner's single-user server: it listens where
JUPYTERHUB_SERVICE_URL says, serves under the prefix, and the hub's login
replaces the token (hub.py).
"""

import asyncio
import logging
import os
import sys
from pathlib import Path

from urllib.parse import unquote, urlsplit

from .access import origins_from_env, stored_token
from .address import DEFAULT_PORT, console_url


def config_from_env():
    from nightjar.config import local_var_folder, workstation_folder
    from .app import Config

    data = Path(os.environ.get("NIGHTJAR_CONSOLE_DATA") or local_var_folder() / "console")
    return Config(data=data,
                  socket=os.environ.get("NIGHTJAR_CONSOLE_SOCKET") or str(data / "terminal.sock"),
                  workstation=workstation_folder(),
                  grader_url=os.environ.get("NIGHTJAR_CONSOLE_GRADER", ""),
                  site_port=int(os.environ.get("NIGHTJAR_SITE_PORT") or 8000),
                  management_port=management_port(os.environ.get("NIGHTJAR_MANAGEMENT_PORT")),
                  solutions=os.environ.get("NIGHTJAR_CONSOLE_SOLUTIONS", "on").strip().lower() != "off",
                  origins=origins_from_env(), hub=spawned_by_hub(),
                  management_login=management_login())


def management_login():
    """(user, password) of the learner's own RabbitMQ login under a course's hub (the broker is
    shared, and that login sees the learner's vhost alone); () elsewhere."""
    if not spawned_by_hub():
        return ()
    url = urlsplit(os.environ.get("NIGHTJAR_AMQP_URL", ""))
    return (unquote(url.username or ""), unquote(url.password or ""))


def spawned_by_hub():
    return bool(os.environ.get("JUPYTERHUB_API_TOKEN") and os.environ.get("JUPYTERHUB_SERVICE_PREFIX"))


def management_port(given):
    """The management UI's port; None for "none" (make local's broker runs none)."""
    if (given or "").strip().lower() == "none":
        return None
    return int(given or 15672)


def listening_port():
    return int(os.environ.get("NIGHTJAR_CONSOLE_PORT") or DEFAULT_PORT)


async def serve():
    from .app import READ_LIMIT, make_app

    config = config_from_env()
    if config.hub:
        config.data.mkdir(parents=True, exist_ok=True)
        where = urlsplit(os.environ.get("JUPYTERHUB_SERVICE_URL") or "http://127.0.0.1:8888/")
        make_app(config).listen(where.port or 80, where.hostname, max_body_size=READ_LIMIT)
        print(f"The lab console serves the hub's user under {os.environ['JUPYTERHUB_SERVICE_PREFIX']}",
              flush=True)
    else:
        token = stored_token(config.data)
        host = os.environ.get("NIGHTJAR_CONSOLE_HOST") or "127.0.0.1"
        make_app(config, token).listen(listening_port(), host, max_body_size=READ_LIMIT)
        print("The lab console is ready. Open it in your browser:", flush=True)
        print(console_url(token), flush=True)
    await asyncio.Event().wait()


def main(argv):
    if argv == ["url"]:
        config = config_from_env()
        print(console_url(stored_token(config.data)))
        return 0
    if argv:
        print("usage: python3 -m nightjar_console [url]", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
