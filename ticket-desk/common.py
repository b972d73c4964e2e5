"""Small helpers for handler.py."""


def checkpoint(pause, name):
    """Stop here if worker.py was started with --pause NAME; otherwise do nothing.

    A checkpoint only waits (Enter continues, Ctrl+C stops the worker). It
    does not pretend that anything happened in the database or in RabbitMQ.
    """
    if pause is not None and pause.point == name:
        pause.hold(name)
