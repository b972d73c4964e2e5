"""What every part of make local shares: where it keeps its state (var/), and how it speaks."""

import json
import socket

from nightjar.config import local_var_folder

VAR = local_var_folder()
STATE = VAR / "local.json"


def say(line=""):
    print(line, flush=True)


def load_state():
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def save_state(state):
    VAR.mkdir(parents=True, exist_ok=True)
    STATE.write_text(json.dumps(state, indent=2) + "\n")


def port_open(host, port):
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False
