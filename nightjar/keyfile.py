"""A secret kept in a file of its own (mode 0600), made once: the site's session key, the console's token."""

import os
import secrets
from pathlib import Path


def read_or_create(path, make):
    """The secret in `path`, written first as make() when the file does not exist yet.

    It is written to a private temporary file and linked into place, so two
    processes starting at once agree on one secret, and none ever reads half of it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(make() + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process was first; use its secret
        finally:
            temporary.unlink()
    return path.read_text().strip()
