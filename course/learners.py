"""The learners of a course: safe, unique names from the hub's user names, and each learner's own
vhost and user on the course's shared RabbitMQ.

JupyterHub accepts almost any user name (capitals, dots, "@", spaces, "Zoë",
"山田", very long ones). Each becomes a slug: a readable ASCII part plus a
short hash of the exact hub name, so two names that differ only in case or in
characters the readable part drops never share a vhost, a RabbitMQ user, a
Docker volume or a container. The slug is a DNS label too (lowercase, starts
with a letter, at most 63 characters), for where Kubernetes would use it.

provision() makes the learner's vhost and user through the management API
(the spawner's hook calls it before a lab starts), with limits that keep one
learner from raising the broker's memory alarm for everyone; remove() undoes
it. Both can run any number of times. The password is derived from a course
secret, so nothing needs storing:

    python3 -m course.learners provision NAME   prints the learner's AMQP URL
    python3 -m course.learners remove NAME      prints what it removed

reading NIGHTJAR_COURSE_ADMIN_URL (the broker's administrator, as an AMQP
URL), NIGHTJAR_COURSE_MANAGEMENT_URL (default: port 15672 on that host),
NIGHTJAR_COURSE_SECRET_FILE (default var/course/learner-secret, made 0600 on
first use), and NIGHTJAR_COURSE_AMQP_HOST / NIGHTJAR_COURSE_AMQP_PORT (where
the labs reach the broker; default the administrator URL's host and port).
"""

import base64
import hashlib
import hmac
import os
import re
import secrets
import sys
import unicodedata
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from nightjar import keyfile
from nightjar.config import local_var_folder
from nightjar.rabbitadmin import Admin, AdminError, Tenant, default_management_url

# The lab's container and the learner's volume, named after the course (its compose project:
# two courses on one Docker engine never share a name) and the slug; the course's spawner
# hook sets them (course/spawners.py).
CONTAINER_TEMPLATE = "{course}-{slug}"
VOLUME_TEMPLATE = "{course}-{slug}-files"
RABBIT_TEMPLATE = "learner-{slug}"  # the vhost and the RabbitMQ user: each course has its broker
DEFAULT_COURSE = "nightjar-course"
STAFF_GROUP = "course-staff"  # the hub's group of those who see the instructor's page, with its admins
COURSE_NAME = re.compile(r"[a-z][a-z0-9-]{0,18}")  # so a volume name has at most 19 + 1 + 37 + 6 = 63
READABLE_LENGTH = 24  # so a slug has at most 2 + 24 + 1 + 10 = 37 characters
HASH_LENGTH = 10  # hex digits: 40 bits, about 1 in 20 million that two of 300 learners clash

# What one learner may use of the shared broker. A connection costs the broker
# about 100 KiB, a channel some tens, a quorum queue a log of its own: these
# bounds, not the learners' good manners, keep the memory alarm (which blocks
# every publisher on the node) away.
# Connections: the site keeps one publisher per server thread (NIGHTJAR_SITE_THREADS,
# 8) and its requeue loop opens one; worker.py one, desk.py one, a terminal or two
# running a worker or a script of the learner's own; and a few still closing.
MAX_CONNECTIONS = 16
# The lab opens one channel a connection; four times that is room, never thousands.
MAX_CHANNELS = 64
# Queues: the ticket queue and its dead-letter queue, the two of a Check's
# throwaway trial lab, and room for the learner's own experiments.
MAX_QUEUES = 8
# Per queue: a job is about 100 bytes, and a unit needs a few dozen; a thousand
# is far more than any walk through the lab. The byte bound stops a script of
# the learner's own from filling a queue with large messages: at most
# MAX_QUEUES MiB a learner.
MAX_LENGTH = 1000
MAX_LENGTH_BYTES = 1024 * 1024
# A full queue refuses the next publish (a nack under publisher confirms)
# rather than dropping its oldest job: the site keeps the registration, says
# it is saved and waiting for the queue, and queues it once there is room.
# Dropping would lose a registration silently, the very thing the lab teaches
# never to do.
OVERFLOW = "reject-publish"
POLICY = "nightjar-course-limits"  # applies to every queue of the vhost, the lab's included

PASSWORD_HASHING = "rabbit_password_hashing_sha256"


@dataclass(frozen=True)
class Learner:
    """One hub user's names; slug is unique to the exact hub name."""

    hub_name: str
    slug: str
    course: str = DEFAULT_COURSE

    @property
    def vhost(self):
        return RABBIT_TEMPLATE.format(slug=self.slug)

    @property
    def rabbit_user(self):
        return RABBIT_TEMPLATE.format(slug=self.slug)

    @property
    def volume(self):
        return VOLUME_TEMPLATE.format(course=self.course, slug=self.slug)

    @property
    def container(self):
        return CONTAINER_TEMPLATE.format(course=self.course, slug=self.slug)


def names(hub_name, course=DEFAULT_COURSE):
    """The Learner for a JupyterHub user name in the course of that name."""
    if not isinstance(hub_name, str) or not hub_name:
        raise ValueError(f"not a hub user name: {hub_name!r}")
    if not COURSE_NAME.fullmatch(course):
        raise ValueError(f"a course's name is 1 to 19 lower-case letters, digits and '-',"
                         f" starting with a letter: {course!r}")
    ascii_name = unicodedata.normalize("NFKD", hub_name).encode("ascii", "ignore").decode()
    readable = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower())[:READABLE_LENGTH].strip("-")
    if not readable[:1].isalpha():  # "山田", "123": a DNS label starts with a letter
        readable = "u-" + readable if readable else "u"
    digest = hashlib.sha256(hub_name.encode()).hexdigest()[:HASH_LENGTH]
    return Learner(hub_name, f"{readable}-{digest}", course)


def _derive(course_secret, purpose, learner):
    message = f"{purpose}\0{learner.rabbit_user}".encode()
    return hmac.new(course_secret.encode(), message, hashlib.sha256).digest()


def amqp_password(course_secret, learner):
    """The learner's RabbitMQ password: the same for the same secret and learner, URL-safe."""
    return base64.urlsafe_b64encode(_derive(course_secret, "amqp-password", learner)).decode().rstrip("=")


def password_hash(course_secret, learner):
    """RabbitMQ's SHA-256 hash of the password (4 bytes of salt, then SHA-256 of salt and password).

    The salt is derived too, so provisioning again writes the very same user,
    and the password itself never crosses the management API.
    """
    salt = _derive(course_secret, "amqp-salt", learner)[:4]
    digest = hashlib.sha256(salt + amqp_password(course_secret, learner).encode()).digest()
    return base64.b64encode(salt + digest).decode()


def read_secret(path):
    """The course secret kept in path (mode 0600), made on first use."""
    return keyfile.read_or_create(path, lambda: secrets.token_urlsafe(32))


@dataclass(frozen=True)
class Limits:
    max_connections: int = MAX_CONNECTIONS
    max_channels: int = MAX_CHANNELS
    max_queues: int = MAX_QUEUES
    max_length: int = MAX_LENGTH
    max_length_bytes: int = MAX_LENGTH_BYTES


@dataclass(frozen=True)
class Access:
    """What a learner's lab is given: its AMQP URL, and its login to the management UI."""

    amqp_url: str
    user: str
    password: str


def provision(admin, learner, secret, limits=Limits(), host="127.0.0.1", port=5672):
    """Make (or make again, unchanged) the learner's vhost, user, limits and policy; their Access."""
    vhost, user = quote(learner.vhost, safe=""), quote(learner.rabbit_user, safe="")
    admin.call("PUT", f"vhosts/{vhost}", {})
    # "management": the management UI, showing the vhosts the user may use (its own) and no other.
    admin.call("PUT", f"users/{user}", {"password_hash": password_hash(secret, learner),
                                         "hashing_algorithm": PASSWORD_HASHING, "tags": "management"})
    admin.call("PUT", f"permissions/{vhost}/{user}", {"configure": ".*", "write": ".*", "read": ".*"})
    admin.call("PUT", f"vhost-limits/{vhost}/max-connections", {"value": limits.max_connections})
    admin.call("PUT", f"vhost-limits/{vhost}/max-queues", {"value": limits.max_queues})
    admin.call("PUT", f"user-limits/{user}/max-channels", {"value": limits.max_channels})
    # The user may not change policies (no "policymaker" tag); a queue argument
    # may lower a length, never raise it: RabbitMQ applies the smaller of the two.
    admin.call("PUT", f"policies/{vhost}/{POLICY}", {
        "pattern": ".*", "apply-to": "queues", "priority": 0,
        "definition": {"max-length": limits.max_length, "max-length-bytes": limits.max_length_bytes,
                       "overflow": OVERFLOW}})
    password = amqp_password(secret, learner)
    tenant = Tenant(learner.vhost, learner.rabbit_user, password)
    return Access(tenant.url(host, port), learner.rabbit_user, password)


def remove(admin, learner):
    """Delete the learner's user and vhost (its queues, limits, policy; its connections close).

    Nothing to delete is no error; a broker that does not answer is.
    """
    for path in (f"users/{quote(learner.rabbit_user, safe='')}", f"vhosts/{quote(learner.vhost, safe='')}"):
        try:
            admin.call("DELETE", path)
        except AdminError as error:
            if error.status != 404:
                raise


def from_environment(environ=None):
    """(admin, secret, host, port) from the NIGHTJAR_COURSE_... variables."""
    env = os.environ if environ is None else environ
    admin_url = env.get("NIGHTJAR_COURSE_ADMIN_URL")
    if not admin_url:
        raise AdminError("set NIGHTJAR_COURSE_ADMIN_URL to the course broker's administrator"
                         " (amqp://USER:PASSWORD@HOST:PORT/)")
    admin = Admin(env.get("NIGHTJAR_COURSE_MANAGEMENT_URL") or default_management_url(admin_url), admin_url)
    secret = read_secret(env.get("NIGHTJAR_COURSE_SECRET_FILE")
                         or local_var_folder(env) / "course" / "learner-secret")
    parts = urlsplit(admin_url)
    host = env.get("NIGHTJAR_COURSE_AMQP_HOST") or parts.hostname or "127.0.0.1"
    port = int(env.get("NIGHTJAR_COURSE_AMQP_PORT") or parts.port or 5672)
    return admin, secret, host, port


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("provision", "remove"):
        print("usage: python3 -m course.learners provision|remove HUB_USER_NAME", file=sys.stderr)
        return 2
    command, learner = args[0], names(args[1])
    try:
        admin, secret, host, port = from_environment()
        if command == "provision":
            print(provision(admin, learner, secret, host=host, port=port).amqp_url)
        else:
            remove(admin, learner)
            print(f"Removed vhost {learner.vhost} and user {learner.rabbit_user}.")
    except (AdminError, OSError) as error:  # OSError: the secret file
        print(f"course.learners {command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
