"""LTI 1.3 in the course's service: the course's tool key and its JWKS, every launch from the LMS,
and the instructor's view of the grades sent back (course/ags.py sends them).

    GET  lti/jwks       the tool's public key as a JWKS, for anyone: the LMS checks the service's
                        client assertions with it (the hub's /hub/lti13/config names it)
    POST lti/launches   one launch, as the hub's post-auth hook posts it (course/lti_login.py) with
                        the service's own token; every launch is kept, none overwritten
    POST lti/send       the instructor's "Send grades": every score the LMS lacks, now
    POST lti/send-all   the instructor's "Send all again": every score, once more

Settings: NIGHTJAR_LTI_TOKEN_URL (the LMS's token endpoint: without it launches are kept and no
grade is sent), NIGHTJAR_LTI_TOOL_KEY (the tool's private key, made on the first start; `make
course` keeps it in var/course/lti/, mode 0600), NIGHTJAR_LTI_RETRY_SECONDS (the first wait
before a failed send is tried again; then twice as long each time).
"""

import base64
import datetime
import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass

import tornado.ioloop
import tornado.web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from nightjar import keyfile

from . import ags

CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"
AGS_CLAIM = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
JWKS_PATH = "lti/jwks"  # under the service's prefix: /services/nightjar/lti/jwks
TOOL_KEY = "/srv/nightjar-lti/tool-key.pem"
# A launch as the service keeps it: (field, required). Lists are kept as JSON.
LAUNCH_FIELDS = (("hub_user", True), ("sub", True), ("issuer", True), ("client_id", True),
                 ("deployment_id", True), ("context_id", False), ("context_title", False),
                 ("resource_link_id", False), ("resource_link_title", False), ("lineitem", False),
                 ("lineitems", False), ("scopes", False), ("person", False), ("roles", False))
LISTS = {"scopes", "roles"}


def launch_record(claims, hub_user):
    """What the service keeps of a launch: the validated id_token's claims, and the hub user."""
    context = claims.get(CLAIM + "context") or {}
    link = claims.get(CLAIM + "resource_link") or {}
    endpoint = claims.get(AGS_CLAIM) or {}
    audience = claims["aud"]
    return {"hub_user": hub_user, "sub": claims["sub"], "issuer": claims["iss"],
            "client_id": claims.get("azp") or (audience if isinstance(audience, str) else audience[0]),
            "deployment_id": claims[CLAIM + "deployment_id"],
            "context_id": context.get("id"), "context_title": context.get("title") or context.get("label"),
            "resource_link_id": link.get("id"), "resource_link_title": link.get("title"),
            "lineitem": endpoint.get("lineitem"), "lineitems": endpoint.get("lineitems"),
            "scopes": endpoint.get("scope") or [], "person": claims.get("name") or claims.get("email"),
            "roles": claims.get(CLAIM + "roles") or []}


def checked_record(record):
    """The record's values in LAUNCH_FIELDS' order; ValueError when one is missing or not text."""
    if not isinstance(record, dict):
        raise ValueError("send a launch as a JSON object")
    values = []
    for field, required in LAUNCH_FIELDS:
        value = record.get(field)
        if field in LISTS:
            if not isinstance(value or [], list) or not all(isinstance(item, str) for item in value or []):
                raise ValueError(f"{field} is a list of strings")
            value = json.dumps(value or [])
        elif (required and not value) or not isinstance(value, (str, type(None))):
            raise ValueError(f"{field} is {'required ' if required else ''}text")
        values.append(value)
    return values


class Launches:
    """Every launch from the LMS, in the service's database."""

    def __init__(self, db):
        self.db = db
        columns = ", ".join(f"{field} TEXT{' NOT NULL' if required else ''}" for field, required in LAUNCH_FIELDS)
        self.db.execute(f"CREATE TABLE IF NOT EXISTS lti_launches (id INTEGER PRIMARY KEY,"
                        f" at REAL NOT NULL, {columns})")

    def add(self, record):
        values = checked_record(record)
        names = ", ".join(field for field, _ in LAUNCH_FIELDS)
        marks = ", ".join("?" for _ in LAUNCH_FIELDS)
        self.db.execute(f"INSERT INTO lti_launches (at, {names}) VALUES (?, {marks})", (time.time(), *values))

    def destinations(self, learner):
        """Where the learner's score goes: each line item they launched from (the latest launch's
        client_id and sub), when its launch allowed the score scope."""
        found = {}
        for lineitem, client_id, sub, scopes in self.db.execute(
                "SELECT lineitem, client_id, sub, scopes FROM lti_launches WHERE hub_user = ?"
                " AND lineitem IS NOT NULL ORDER BY id DESC", (learner,)):
            if lineitem not in found and ags.SCORE_SCOPE in json.loads(scopes):
                found[lineitem] = {"lineitem": lineitem, "client_id": client_id, "sub": sub}
        return list(found.values())

    def count(self):
        return self.db.execute("SELECT count(*) FROM lti_launches").fetchone()[0]

    def names(self):
        """({hub user: the LMS's name for them}, {line item: its resource link's title}), latest first."""
        people, links = {}, {}
        for user, person, lineitem, title in self.db.execute(
                "SELECT hub_user, person, lineitem, resource_link_title FROM lti_launches ORDER BY id"):
            people[user] = person or people.get(user) or ""
            if lineitem:
                links[lineitem] = title or links.get(lineitem) or ""
        return people, links


def tool_key(path):
    """The tool's private key (PEM), made on the first start and kept in `path` (mode 0600)."""
    def new_key():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode()
    return keyfile.read_or_create(path, new_key)


def public_jwk(private_pem):
    """The key's public half as a JWK, its kid the RFC 7638 thumbprint (stable for the key)."""
    public = serialization.load_pem_private_key(private_pem.encode(), password=None).public_key()
    jwk = RSAAlgorithm.to_jwk(public, as_dict=True)
    canonical = json.dumps({name: jwk[name] for name in ("e", "kty", "n")}, separators=(",", ":"))
    kid = base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).decode().rstrip("=")
    return {**jwk, "kid": kid, "alg": "RS256", "use": "sig"}


@dataclass
class Lti:
    """The service's LTI part: its key, the launches, the sends (None without a token URL)."""

    jwks: dict
    launches: Launches
    store: object  # course/service.py's Store: the verdicts
    sends: ags.Sends = None
    token_url: str = ""


def start(store, environ=None):
    """The LTI part of the service on `store` (course/service.py's Store): every stored verdict goes
    to the sends, and the sender runs on the service's event loop."""
    env = os.environ if environ is None else environ
    key = tool_key(env.get("NIGHTJAR_LTI_TOOL_KEY") or TOOL_KEY)
    jwk = public_jwk(key)
    lti = Lti({"keys": [jwk]}, Launches(store.db), store, token_url=env.get("NIGHTJAR_LTI_TOKEN_URL", ""))
    if lti.token_url:
        lms = ags.Lms(lti.token_url, key, jwk["kid"])
        retry = float(env.get("NIGHTJAR_LTI_RETRY_SECONDS") or ags.RETRY_SECONDS)
        lti.sends = ags.Sends(store.db, lms, lti.launches.destinations, retry)
        store.after_graded = lti.sends.verdict_stored
        tornado.ioloop.IOLoop.current().add_callback(lti.sends.run)
    return lti


class Jwks(tornado.web.RequestHandler):
    def get(self):
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "max-age=300")
        self.finish(json.dumps(self.settings["lti"].jwks))


class LaunchRecords(tornado.web.RequestHandler):
    """The hub's post-auth hook posts each launch here with the service's own token (a secret the
    hub and the service alone hold), so no launch waits on the hub's API."""

    def post(self):
        given = self.request.headers.get("Authorization", "").removeprefix("token ")
        if not hmac.compare_digest(given.encode(), os.environ["JUPYTERHUB_API_TOKEN"].encode()):
            raise tornado.web.HTTPError(403)
        try:
            record = json.loads(self.request.body)
            self.settings["lti"].launches.add(record)
        except ValueError as error:
            raise tornado.web.HTTPError(400, reason=str(error)[:200]) from error
        lti = self.settings["lti"]
        last = lti.store.last_grades().get(record["hub_user"])
        if lti.sends and last:  # a verdict from before this launch goes to its line item too
            lti.sends.verdict_stored(record["hub_user"], last[1])
        self.finish({"kept": record["hub_user"]})


def routes(prefix, staff, shared):
    """The service's LTI routes; `staff` is the service's base handler of the instructor's pages."""

    class SendChanged(staff):
        def post(self):
            if self.settings["lti"].sends:
                self.settings["lti"].sends.send_changed()
            self.redirect(self.reverse_url("page"))

    class SendAll(staff):
        def post(self):
            if self.settings["lti"].sends:
                self.settings["lti"].sends.send_all_again()
            self.redirect(self.reverse_url("page"))

    return [(prefix + JWKS_PATH, Jwks), (prefix + "lti/launches", LaunchRecords),
            (prefix + "lti/send", SendChanged, shared), (prefix + "lti/send-all", SendAll, shared)]


def shown_time(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class SendingStatus(tornado.web.UIModule):
    """The instructor's page's section on the grades sent to the LMS (templates/lti_sending.html);
    nothing while no launch came from an LMS."""

    def render(self):
        lti = self.handler.settings.get("lti")
        if lti is None or not lti.launches.count():
            return ""
        people, links = lti.launches.names()
        return self.render_string("lti_sending.html", token_url=lti.token_url,
                                  status=lti.sends.status() if lti.sends else None,
                                  people=people, links=links, when=shown_time)
