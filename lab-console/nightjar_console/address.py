"""Where the learner's browser finds the lab console: its URL with the token.

    python3 -m nightjar_console.address    prints "Lab console: URL" (in a Dev Container's terminal)

On the learner's machine the console is the host's 127.0.0.1 at NIGHTJAR_LAB_PORT;
in a codespace (CODESPACE_NAME and GITHUB_CODESPACES_PORT_FORWARDING_DOMAIN set)
it is the forwarded https://NAME-PORT.DOMAIN/. Standard library only: the
Workstation image runs this too.
"""

import os
import sys
from pathlib import Path

DEFAULT_PORT = 8080
TOKEN_FILE = "token"


def lab_port(environ=None):
    env = os.environ if environ is None else environ
    return int(env.get("NIGHTJAR_LAB_PORT") or env.get("NIGHTJAR_CONSOLE_PORT") or DEFAULT_PORT)


def base_url(environ=None):
    env = os.environ if environ is None else environ
    name, domain = env.get("CODESPACE_NAME"), env.get("GITHUB_CODESPACES_PORT_FORWARDING_DOMAIN")
    if name and domain:
        return f"https://{name}-{lab_port(env)}.{domain}/"
    return f"http://127.0.0.1:{lab_port(env)}/"


def console_url(token, environ=None):
    return f"{base_url(environ)}?token={token}"


def main():
    folder = Path(os.environ.get("NIGHTJAR_CONSOLE_DATA") or "/run/nightjar-console-data")
    try:
        token = (folder / TOKEN_FILE).read_text().strip()
    except OSError:
        print(f"The lab console has not started yet (no token in {folder}); it prints its address"
              " when it starts.", file=sys.stderr)
        return 1
    print(f"Lab console: {console_url(token)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
