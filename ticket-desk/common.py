"""Small helpers for handler.py (and one for worker.py and desk.py)."""

import os


def checkpoint(pause, name):
    """Stop here if worker.py was started with --pause NAME; otherwise do nothing.

    A checkpoint only waits (Enter continues, Ctrl+C stops the worker). It
    does not pretend that anything happened in the database or in RabbitMQ.
    """
    if pause is not None and pause.point == name:
        pause.hold(name)


def not_activated(missing):
    """What to run when this python3 lacks the lab's packages (make local keeps them in .venv)."""
    problem = f"This python3 does not have the lab's packages ({missing})"
    # make local copies this folder to LAB/workstation/ticket-desk and its packages are in LAB/.venv.
    lab = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    activate = os.path.join(lab, ".venv", "bin", "activate")
    if os.path.exists(activate):
        return f"{problem}: run 'source {os.path.relpath(activate)}' first, then try again."
    return f"{problem}: activate the lab's virtual environment first (the README says how)."
