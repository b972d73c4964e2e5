"""Whether the Nightjar site answers its health page; standard library only, so `make up` needs no venv."""

import urllib.request


def site_answers(base_url, timeout=2):
    """True when the site at base_url ("http://host:port/") serves /healthz with 200."""
    try:
        with urllib.request.urlopen(base_url + "healthz", timeout=timeout) as response:
            return response.status == 200
    except OSError:
        return False
