"""The course's login: the hub's own login form for the instructor, and LTI 1.3 launches from the
course's LMS beside it (course/jupyterhub_config.py configures it from NIGHTJAR_LTI_*).

JupyterHub takes one authenticator class, so CourseLogin is both: NativeAuthenticator first in its
lineage (/hub/login, sign-up and /hub/authorize as before: the instructor's way in without the
LMS) and LTI13Authenticator of jupyterhub-ltiauthenticator after it (its settings and its three
pages under /hub/lti13/). authenticate() tells them apart by the page that logs in: a launch is
the LTI callback's. What the course adds to the library, which it does not check:
- a launch comes from the course's issuer and one of its deployments;
- a nonce is taken once: an id_token posted again is refused, its cookies with it or not;
- a launch shown inside the LMS's page (an iframe, where the hub refuses to be shown and its
  cookies would be third-party ones) gets a page that opens it in a new window;
- the hub name is "lti-" and a hash of the issuer and `sub`: the same at every launch of that
  person, and never one a sign-up can take. `sub` itself stays in the auth_state and in the
  launch's record: grades go back by it;
- the group course-staff follows the launch's roles (Instructor, TeachingAssistant);
- /hub/lti13/config names the course's JWKS (public_jwk_url) and the hub as its target link.
record_launch, the hub's post-auth hook, sends each launch to the course's service (course/lti.py).
"""

import asyncio
import hashlib
import json
import time
from urllib.parse import urlencode

import tornado.httpclient
from jupyterhub.auth import Authenticator
from jupyterhub.utils import url_path_join
from ltiauthenticator.lti13.auth import LTI13Authenticator
from ltiauthenticator.lti13.handlers import LTI13CallbackHandler, LTI13ConfigHandler, LTI13LoginInitHandler
from nativeauthenticator import NativeAuthenticator
from tornado import web
from traitlets import Set, Unicode

from . import signups
from .learners import STAFF_GROUP
from .lti import CLAIM, launch_record

NAME_PREFIX = "lti-"
STAFF_ROLES = {  # the LMS's roles in the course (LIS v2 context roles) that make a person staff
    "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor",
    "http://purl.imsglobal.org/vocab/lis/v2/membership#TeachingAssistant",
    "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant",
    "Instructor", "TeachingAssistant",  # the short names some platforms still send
}
NONCE_SECONDS = 600  # a launch's id_token is refused when older (ltiauthenticator's max_age)
RECORD_RETRIES = (5, 30, 120, 600, 3600)  # seconds: a launch the service did not take, sent again


def several(setting):
    """The values of a setting that may hold several, separated by spaces or commas."""
    return set(setting.replace(",", " ").split())


def hub_name(issuer, sub):
    """The hub user of the person `sub` of the LMS `issuer`: stable, lower case, never a sign-up's."""
    return NAME_PREFIX + hashlib.sha256(f"{issuer}\0{sub}".encode()).hexdigest()[:16]


def refuse(handler, status, why):
    """A launch refused: the page says why, and so does the hub's log."""
    handler.log.warning("LTI launch refused (%d): %s", status, why)
    raise web.HTTPError(status, why)


class CourseLogin(NativeAuthenticator, LTI13Authenticator):
    login_service = ""  # the login form is NativeAuthenticator's, not an LTI button
    deployment_id = Set(Unicode(), config=True, help="The LMS's deployment ids this course takes launches from.")
    jwks_path = Unicode(config=True, help="The course's JWKS under the hub's base URL (its service's).")
    launch_records_url = Unicode(config=True, help="Where the post-auth hook posts each launch.")
    launch_records_token = Unicode(config=True, help="The token it posts with: the course service's own.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.used_nonces = {}  # nonce: until when it would still be taken
        self.records_on_their_way = set()

    def login_url(self, base_url):
        return Authenticator.login_url(self, base_url)  # the hub's login form, not LTI's initiation

    def get_handlers(self, app):
        return [*NativeAuthenticator.get_handlers(self, app), ("/lti13/oauth_login", LaunchStart),
                ("/lti13/oauth_callback", LTI13CallbackHandler), ("/lti13/config", ToolConfiguration),
                *signups.HANDLERS]

    def lti_ready(self):
        return all((self.issuer, self.client_id, self.deployment_id, self.authorize_url, self.jwks_endpoint))

    async def authenticate(self, handler, data):
        if isinstance(handler, LTI13CallbackHandler):
            return self.launch(handler, data)  # data: the id_token, its signature checked
        name = await NativeAuthenticator.authenticate(self, handler, data)
        return name and {"name": name, "groups": None}  # None: the hub's own groups, unchanged

    def launch(self, handler, claims):
        deployment = claims.get(CLAIM + "deployment_id")
        if deployment not in self.deployment_id:
            refuse(handler, 403, f"This course takes launches from its own deployment in the LMS, not"
                                 f" from deployment {deployment!r}.")
        if not claims.get("sub"):
            refuse(handler, 400, "The LMS sent no user (sub): the course needs to know who launched.")
        now = time.time()
        self.used_nonces = {nonce: until for nonce, until in self.used_nonces.items() if until > now}
        if claims["nonce"] in self.used_nonces:
            refuse(handler, 400, "This launch was used already (its nonce came again): launch again from the LMS.")
        self.used_nonces[claims["nonce"]] = max(claims["exp"], claims["iat"] + NONCE_SECONDS)
        staff = STAFF_ROLES & set(claims.get(CLAIM + "roles") or [])
        return {"name": hub_name(claims["iss"], claims["sub"]), "auth_state": claims,
                "groups": [STAFF_GROUP] if staff else []}

    def create_user(self, username, password, **kwargs):
        if self.normalize_username(username).startswith(NAME_PREFIX):
            return None  # the names of launches from the LMS
        return super().create_user(username, password, **kwargs)

    async def keep_launch(self, record):
        """Post the launch to the course's service; if it does not take it now, again later, in the
        background (the launch itself goes on)."""
        try:
            await self.post_launch(record)
        except Exception as error:  # noqa: BLE001 (whatever failed, the launch is kept for later)
            self.log.warning("The course's service did not take %s's launch (%s): sending it again"
                             " in the background", record["hub_user"], error)
            later = asyncio.ensure_future(self.post_launch_later(record))
            self.records_on_their_way.add(later)
            later.add_done_callback(self.records_on_their_way.discard)

    async def post_launch(self, record):
        await tornado.httpclient.AsyncHTTPClient().fetch(
            self.launch_records_url, method="POST", body=json.dumps(record), request_timeout=10,
            headers={"Authorization": f"token {self.launch_records_token}", "Content-Type": "application/json"})

    async def post_launch_later(self, record):
        for delay in RECORD_RETRIES:
            await asyncio.sleep(delay)
            try:
                return await self.post_launch(record)
            except Exception as error:  # noqa: BLE001
                self.log.warning("%s's launch: the course's service again did not take it (%s)",
                                 record["hub_user"], error)
        self.log.error("%s's launch was not recorded: %s", record["hub_user"], json.dumps(record))


async def record_launch(authenticator, handler, authentication):
    """The hub's post-auth hook: every launch from the LMS goes to the course's service, which
    keeps them all (the auth_state holds only the last)."""
    if isinstance(handler, LTI13CallbackHandler):
        await authenticator.keep_launch(launch_record(authentication["auth_state"], authentication["name"]))
    return authentication


class LaunchStart(LTI13LoginInitHandler):
    """The LMS's login initiation, with the course's checks first and the frame's own page."""

    async def post(self):
        login = self.authenticator
        if not login.lti_ready():
            refuse(self, 503, "LTI 1.3 is not set up on this course yet: its NIGHTJAR_LTI_* settings are missing.")
        if self.get_argument("iss", "") != login.issuer:
            refuse(self, 403, f"This course takes launches from {login.issuer} only, not from"
                              f" {self.get_argument('iss', 'an LMS that did not say')}.")
        deployment = self.get_argument("lti_deployment_id", "")
        if deployment and deployment not in login.deployment_id:
            refuse(self, 403, f"This course takes launches from its own deployment in the LMS, not"
                              f" from deployment {deployment!r}.")
        if self.request.headers.get("Sec-Fetch-Dest") in ("iframe", "frame"):
            # The launch would end in a frame the hub refuses to be shown in. This page may be
            # framed: it opens the same launch in a window of its own.
            arguments = {name: self.get_argument(name) for name in self.request.arguments}
            self.set_header("Content-Security-Policy", "frame-ancestors *")
            self.finish(await self.render_template(
                "lti-new-window.html", launch_url=f"{self.request.path}?{urlencode(arguments)}"))
            return
        super().post()

    get = post

    def _set_oauth_cookie(self, key, value):
        # The LMS posts the id_token from its own site: under https, the state cookies say
        # SameSite=None so that every browser sends them with that cross-site post.
        cross_site = {"samesite": "None", "secure": True} if self.authenticator.get_uri_scheme(
            self.request) == "https" else {}
        self._set_cookie(key, value, expires_days=1, httponly=True, encrypted=True, **cross_site)


class ToolConfiguration(LTI13ConfigHandler):
    """The library's tool configuration for the LMS's registration form (Canvas reads this JSON),
    with the course's JWKS URL, the hub as the target link, and new windows."""

    def write(self, chunk):
        try:
            config = json.loads(chunk)
        except (TypeError, ValueError):  # not the configuration (an error page)
            return super().write(chunk)
        origin = f"{self.authenticator.get_uri_scheme(self.request)}://{self.request.host}"
        hub = origin + self.hub.base_url.rstrip("/")
        config.update(target_link_uri=hub, oidc_initiation_url=hub + "/lti13/oauth_login",
                      redirect_uris=[hub + "/lti13/oauth_callback"],
                      public_jwk_url=origin + url_path_join(self.base_url, self.authenticator.jwks_path))
        for extension in config.get("extensions", []):
            for placement in extension.get("settings", {}).get("placements", []):
                placement.update(target_link_uri=hub, windowTarget="_blank")
        super().write(json.dumps(config, indent=2))


class NoStatsd:
    """NativeAuthenticator 1.3 (its newest release) still times its login with the statsd client
    JupyterHub 5 removed: without this, every login answers 500."""

    def timer(self, name):
        return self

    def start(self):
        return self

    def stop(self, send=True):
        pass


def native_login_on_jupyterhub_6():
    """NativeAuthenticator's login form, mended for JupyterHub 6 (the configuration calls it)."""
    from nativeauthenticator import handlers

    login = handlers.LoginHandler
    login.statsd = NoStatsd()
    render = login._render
    # JupyterHub 6 renders a refused form through _render(sync=True, message=...).
    login._render = lambda self, login_error=None, username=None, **ignored: render(self, login_error, username)
