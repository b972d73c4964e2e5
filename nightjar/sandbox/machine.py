"""What this machine must offer the sandbox: root, util-linux's tools, control groups, a mount namespace of the grader's own."""

import os
import shutil

from . import cgroups
from .root import private_mounts

TOOLS = ("nsenter", "setpriv", "prlimit", "sh")


class Unavailable(Exception):
    """The sandbox cannot be set up here; the text says why in one sentence."""


def unavailable_reason():
    """None when this machine can run the sandbox, else why not (one sentence)."""
    if os.geteuid() != 0:
        return "the sandbox's Linux route needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"the sandbox needs {', '.join(missing)} (util-linux)"
    try:
        cgroups.here()
    except (cgroups.Unavailable, OSError) as error:
        return f"the sandbox needs control groups: {error}"
    return None


_in_private_mounts = False  # set once, by enter_private_mounts()


def enter_private_mounts():
    """Give this process a mount namespace of its own (call it before any thread starts)."""
    global _in_private_mounts
    if not _in_private_mounts:
        try:
            private_mounts()
        except OSError as error:
            raise Unavailable(f"the sandbox needs a mount namespace of its own ({error.strerror})")
        _in_private_mounts = True


def in_private_mounts():
    return _in_private_mounts
