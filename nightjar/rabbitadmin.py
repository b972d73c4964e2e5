"""A vhost and a user of its own on a broker, through RabbitMQ's management API: a submission's
on the grading broker (nightjar/sandbox/), a learner's on the course's broker (course/learners.py).

The grader holds the broker's administrator login; a sandboxed submission
gets a user that may use its own vhost and nothing else (no tags: no
management, no other vhost), so it can neither see nor touch another
submission's queues. Deleting the vhost deletes its queues and closes every
connection to it.
"""

import base64
import json
import secrets
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

TIMEOUT = 10


class AdminError(Exception):
    """The management API refused or did not answer; the text says which and why.

    status: the HTTP status it answered (404: no such vhost or user), None when it did not answer.
    """

    def __init__(self, text, status=None):
        super().__init__(text)
        self.status = status


@dataclass(frozen=True)
class Tenant:
    vhost: str
    user: str
    password: str

    def url(self, host="127.0.0.1", port=5672):
        """The AMQP URL this tenant's programs use."""
        return f"amqp://{quote(self.user, safe='')}:{quote(self.password, safe='')}@{host}:{port}/{quote(self.vhost, safe='')}"


def default_management_url(amqp_url):
    """Port 15672 on the AMQP URL's host: where RabbitMQ's management plugin listens by default."""
    return f"http://{urlsplit(amqp_url).hostname or '127.0.0.1'}:15672/"


def with_vhost(amqp_url, vhost):
    """The same broker and login, on another vhost."""
    return urlunsplit(urlsplit(amqp_url)._replace(path="/" + quote(vhost, safe="")))


class Admin:
    """The management API at management_url, with the administrator login of admin_amqp_url."""

    def __init__(self, management_url, admin_amqp_url):
        self.base = management_url.rstrip("/") + "/api/"
        parts = urlsplit(admin_amqp_url)
        login = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
        self._auth = "Basic " + base64.b64encode(login.encode()).decode()

    def call(self, method, path, body=None):
        """The API's answer (bytes) to METHOD /api/PATH; AdminError when it fails."""
        request = urllib.request.Request(
            self.base + path, method=method, headers={
                "Authorization": self._auth, "Content-Type": "application/json"},
            data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
                return answer.read()
        except urllib.error.HTTPError as error:
            raise AdminError(f"the management API answered {error.code} to {method} /api/{path}",
                             status=error.code) from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise AdminError(f"the management API at {self.base[:-4]} does not answer ({reason})") from None

    def check(self):
        """Raise AdminError unless the API answers this login as an administrator."""
        answer = json.loads(self.call("GET", "whoami"))
        tags = answer.get("tags", [])
        if "administrator" not in (tags if isinstance(tags, list) else str(tags).split(",")):
            raise AdminError(f"the grading broker's login {answer.get('name')!r} is not an administrator")

    def create_tenant(self, prefix):
        """A new vhost and a user allowed on it alone."""
        token = secrets.token_hex(6)
        tenant = Tenant(f"{prefix}-{token}", f"{prefix}-{token}", secrets.token_urlsafe(18))
        vhost = quote(tenant.vhost, safe="")
        self.call("PUT", f"vhosts/{vhost}", {})
        self.call("PUT", f"users/{quote(tenant.user, safe='')}",
                   {"password": tenant.password, "tags": ""})
        self.call("PUT", f"permissions/{vhost}/{quote(tenant.user, safe='')}",
                   {"configure": ".*", "write": ".*", "read": ".*"})
        return tenant

    def delete_tenant(self, tenant):
        """Delete the user and the vhost (its queues, its connections); never raises."""
        for path in (f"users/{quote(tenant.user, safe='')}", f"vhosts/{quote(tenant.vhost, safe='')}"):
            try:
                self.call("DELETE", path)
            except AdminError:
                pass
