"""Who may use the console: the holder of its token, from the console's own origin.

The token is made once, at random, and kept (mode 0600) in the console's
data folder, so the URL printed at the first start keeps working. Opening
`/?token=TOKEN` trades it for a cookie (HttpOnly, SameSite=Strict) holding a
value derived from the token, and takes the token out of the address bar.
After that the cookie carries every request; scripts may send
`Authorization: token TOKEN` instead.

A websocket, and every request that changes something, must also come from
the console's own page: its Origin names the host the request was sent to
(or one of NIGHTJAR_CONSOLE_ORIGINS, for a forwarded port such as
Codespaces'). That stops another site from driving the shell through a
learner's browser (cross-site WebSocket hijacking), and the token stops a
page that merely resolves to 127.0.0.1.
"""

import hashlib
import hmac
import os
import secrets
from pathlib import Path
from urllib.parse import urlsplit

from nightjar.keyfile import read_or_create

from .address import TOKEN_FILE, base_url

COOKIE = "nightjar-console"


def stored_token(folder):
    """NIGHTJAR_CONSOLE_TOKEN, else the token kept in `folder` (made on first use)."""
    given = os.environ.get("NIGHTJAR_CONSOLE_TOKEN", "").strip()
    if given:
        return given
    return read_or_create(Path(folder) / TOKEN_FILE, lambda: secrets.token_urlsafe(32))


class Access:
    """The token's holder (none under a hub, whose login decides: hub.py), and the Origins allowed."""

    def __init__(self, token, origins=()):
        self.token = token or ""
        self.cookie_value = hmac.new(self.token.encode(), b"nightjar-console cookie",
                                     hashlib.sha256).hexdigest() if token else ""
        self.origins = {origin.rstrip("/").lower() for origin in origins if origin}

    def token_matches(self, given):
        return bool(given) and hmac.compare_digest(given.encode(), self.token.encode())

    def allows(self, request):
        """True when the request carries the token (cookie, or an Authorization header)."""
        if not self.token:
            return False
        cookie = request.cookies.get(COOKIE)
        if cookie is not None and hmac.compare_digest(cookie.value.encode(), self.cookie_value.encode()):
            return True
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "token" and self.token_matches(given.strip())

    def origin_allowed(self, request, origin):
        """The Origin is the console's own: the host the request was sent to, or a configured one."""
        if not origin:
            return False
        origin = origin.rstrip("/").lower()
        if origin in self.origins:
            return True
        sent_to = {request.headers.get(name, "").lower() for name in ("Host", "X-Forwarded-Host")}
        return urlsplit(origin).netloc in sent_to - {""}


def origins_from_env(environ=None):
    """NIGHTJAR_CONSOLE_ORIGINS (comma-separated), and Codespaces' forwarded origin when it runs there."""
    env = os.environ if environ is None else environ
    origins = [part.strip() for part in env.get("NIGHTJAR_CONSOLE_ORIGINS", "").split(",") if part.strip()]
    if env.get("CODESPACE_NAME") and env.get("GITHUB_CODESPACES_PORT_FORWARDING_DOMAIN"):
        origins.append(base_url(env).rstrip("/"))
    return origins
