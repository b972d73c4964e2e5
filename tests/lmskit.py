"""An LMS for the course's LTI tests, built on PyPI's lti1p3platform (a platform library the course
did not write): its Registration signs the launches' id_tokens with the LMS's own key and serves
its JWKS, its token endpoint checks the tool's client assertion against the tool's JWKS URL, and
its launch builds the AGS claim. The line item's score endpoint is added here, on the library's
AssignmentsGradesService, as the library's own example adds it.

It runs in a thread of the tests on docker0's address, where the browser, the hub (the JWKS) and
the course's service (the token endpoint, the scores) reach it:

    GET  /course?as=NAME          the course page of the LMS's user NAME (the LMS's login: a cookie),
                                  a launch link for each assignment
    GET  /framed?link=LINK        the same launch, shown inside the LMS's page (an iframe)
    GET  /launch/LINK             the launch: the OIDC login initiation, to the tool
    GET  /authorize               the tool's authentication request: the id_token, in a form the
                                  browser posts to the tool
    GET  /jwks                    the LMS's public keys
    POST /token                   the tool's client-credentials grant (its client assertion)
    POST /lineitems/LINK/scores   a score for the assignment LINK (its line item has a query string)
"""

import html
import json
import subprocess
import threading
import uuid
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract
from lti1p3platform.oidc_login import OIDCLoginAbstract
from lti1p3platform.registration import Registration
from lti1p3platform.request import Request
from lti1p3platform.score import UpdateScoreStatus
from lti1p3platform.service_connector import AssignmentsGradesService

from nightjar.harness.rabbitnode import free_port

MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership#"
COURSE = {"id": "ds-101", "title": "Distributed systems 101", "label": "DS101"}
CLIENT_ID, DEPLOYMENT_ID = "nightjar-tool-1", "deployment-1"


def docker0_address():
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show", "docker0"], capture_output=True, text=True).stdout
    return shown.split("inet ")[1].split("/")[0] if "inet " in shown else None


def new_key():
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM,
                                           serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    return private, public


class Platform(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, registration):
        self._registration = registration

    def get_registration_by_params(self, **kwargs):
        return self._registration


class LmsRequest(Request):
    def build_metadata(self, page):
        return {"method": page.command, "form_data": page.form, "get_data": page.query,
                "headers": page.headers, "content_type": page.headers.get("Content-Type"),
                "path": page.path_only, "json": page.json}


class Login(OIDCLoginAbstract):
    def set_lti_message_hint(self, hint):
        self._lti_message_hint = hint

    def get_redirect(self, url):
        return url


class Launch(LTIAdvantageMessageLaunchAbstract):
    """A resource link launch of the LMS's user (login_hint) and assignment (lti_message_hint)."""

    def __init__(self, request, platform, lms):
        super().__init__(request, platform)
        self.lms = lms
        if lms.next_expires_in is not None:
            self.set_id_token_expiration(lms.next_expires_in)

    def prepare_launch(self, preflight):
        user = self.lms.users[preflight["login_hint"]]
        link = preflight["lti_message_hint"]
        self.set_user_data(user["sub"], user["roles"], full_name=user["name"])
        self.set_resource_link_claim(link, title=self.lms.links[link])
        self.set_launch_context_claim(COURSE["id"], context_title=COURSE["title"], context_label=COURSE["label"])
        self.set_ags(self.lms.url + "/lineitems", self.lms.lineitem(link))

    def get_launch_message(self, include_extra_claims=True):
        return {**super().get_launch_message(include_extra_claims), **self.lms.next_claims}

    def generate_launch_request(self):
        launch = super().generate_launch_request()
        if self.lms.next_key:  # signed with another key, under the LMS's own key id
            claims = jwt.decode(launch["id_token"], options={"verify_signature": False})
            kid = jwt.get_unverified_header(launch["id_token"])["kid"]
            launch["id_token"] = jwt.encode(claims, self.lms.next_key, algorithm="RS256", headers={"kid": kid})
        return launch

    def render_launch_form(self, launch_data, **kwargs):
        fields = "".join(f'<input type="hidden" name="{name}" value="{html.escape(launch_data[name])}">'
                         for name in ("id_token", "state"))
        return (f'<!doctype html><title>Launching</title><form method="post" action="{html.escape(launch_data["launch_url"])}">'
                f'{fields}</form><script>document.forms[0].submit()</script>')


class Grades(AssignmentsGradesService):
    """The AGS score service: the library checks the bearer token and its scope; the scores are
    kept here."""

    def __init__(self, request, platform, lms, link):
        super().__init__(request, platform, lms.url + "/lineitems", lms.lineitem(link))
        self.lms = lms

    def update_score(self, line_item_id, score):
        self.lms.scores.append({"link": line_item_id, **score})
        return UpdateScoreStatus.SUCCESS

    def find_lineitems(self, *args, **kwargs):
        raise NotImplementedError

    find_lineitem = create_lineitem = update_lineitem = delete_lineitem = get_results = find_lineitems


class Lms:
    """The LMS: its users, its assignments and what it received, for the tests to read and steer."""

    def __init__(self, host):
        self.host, self.port = host, free_port()
        self.url = f"http://{host}:{self.port}"
        self.key, public = new_key()
        self.registration = (Registration().set_iss(self.url).set_client_id(CLIENT_ID)
                             .set_deployment_id(DEPLOYMENT_ID).set_platform_private_key(self.key)
                             .set_platform_public_key(public))
        self.platform = Platform(registration=self.registration)
        self.users, self.links = {}, {"unit-2": "Unit 2: acknowledge after the commit",
                                      "unit-3": "Unit 3: idempotent processing"}
        self.scores, self.score_posts, self.tokens = [], [], []  # what came to the score and token endpoints
        self.refuse_scores = 0  # the next score posts answered 503
        # The next launch's id_token changed: claims of its own, another key, another lifetime.
        self.next_claims, self.next_key, self.next_expires_in = {}, None, None
        self.redirect_uris = []
        self.server = None

    def course_settings(self):
        """The NIGHTJAR_LTI_* settings of a course registered with this LMS."""
        return {"NIGHTJAR_LTI_ISSUER": self.url, "NIGHTJAR_LTI_CLIENT_ID": CLIENT_ID,
                "NIGHTJAR_LTI_DEPLOYMENT_ID": DEPLOYMENT_ID, "NIGHTJAR_LTI_AUTH_URL": self.url + "/authorize",
                "NIGHTJAR_LTI_JWKS_URL": self.url + "/jwks", "NIGHTJAR_LTI_TOKEN_URL": self.url + "/token"}

    def register_tool(self, hub_url):
        """The tool's registration in the LMS: its URLs, as /hub/lti13/config names them (the
        library calls the target link URI the launch URL)."""
        (self.registration.set_oidc_login_url(hub_url + "/hub/lti13/oauth_login")
         .set_launch_url(hub_url + "/hub").set_tool_key_set_url(hub_url + "/services/nightjar/lti/jwks"))
        self.redirect_uris = [hub_url + "/hub/lti13/oauth_callback"]

    def person(self, name, roles=("Learner",)):
        self.users[name] = {"sub": str(uuid.uuid4()), "name": name.title() + " Example",
                            "roles": [MEMBERSHIP + role for role in roles]}
        return self.users[name]

    def lineitem(self, link):
        return f"{self.url}/lineitems/{link}?course={COURSE['id']}"

    def start(self):
        lms = self

        class Page(LmsPage):
            pass

        Page.lms = lms
        self.server = ThreadingHTTPServer((self.host, self.port), Page)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()


class LmsPage(BaseHTTPRequestHandler):
    lms = None

    def log_message(self, *args):
        pass

    def parse(self):
        parts = urlsplit(self.path)
        self.path_only, self.query = parts.path, dict(parse_qsl(parts.query))
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        self.form = dict(parse_qsl(body)) if "form-urlencoded" in (self.headers.get("Content-Type") or "") else {}
        self.json = json.loads(body) if body and self.headers.get("Content-Type", "").endswith("json") else None
        cookie = SimpleCookie(self.headers.get("Cookie") or "")
        self.lms_user = cookie["lms-user"].value if "lms-user" in cookie else None

    def answer(self, status, body, content_type="text/html; charset=utf-8", headers=()):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.parse()
        lms, path = self.lms, self.path_only
        if path == "/course":
            links = "".join(f'<li><a href="/launch/{link}">Nightjar lab: {html.escape(title)}</a></li>'
                            for link, title in lms.links.items())
            self.answer(200, f"<!doctype html><title>{COURSE['title']}</title><h1>{COURSE['title']}</h1><ul>{links}</ul>",
                        headers=[("Set-Cookie", f"lms-user={self.query['as']}; Path=/; SameSite=Lax")])
        elif path == "/framed":
            self.answer(200, f'<!doctype html><title>{COURSE["title"]}</title><h1>Nightjar lab</h1>'
                             f'<iframe title="Nightjar lab" src="/launch/{self.query["link"]}" width="900" height="500"></iframe>')
        elif path.startswith("/launch/"):
            login = Login(LmsRequest(self), lms.platform)
            login.set_lti_message_hint(path.rsplit("/", 1)[1])
            self.answer(302, "", headers=[("Location", login.initiate_login(self.lms_user))])
        elif path == "/authorize":
            if self.lms_user is None or self.lms_user != self.query.get("login_hint"):
                self.answer(403, "login_required: not the LMS's user of this launch")
            elif self.query.get("redirect_uri") not in lms.redirect_uris:
                self.answer(400, "invalid redirect_uri")
            else:
                self.answer(200, Launch(LmsRequest(self), lms.platform, lms).lti_launch())
                lms.next_claims, lms.next_key, lms.next_expires_in = {}, None, None
        elif path == "/jwks":
            self.answer(200, json.dumps(lms.platform.get_jwks()), "application/json")
        else:
            self.answer(404, "not found")

    def do_POST(self):
        self.parse()
        lms, path = self.lms, self.path_only
        if path == "/token":
            self.token()
        elif path.startswith("/lineitems/") and path.endswith("/scores"):
            link = path.split("/")[2]
            lms.score_posts.append({"link": link, "query": self.query, "content_type": self.headers.get("Content-Type"),
                                    "body": self.json})
            if lms.refuse_scores:
                lms.refuse_scores -= 1
                self.answer(503, "The gradebook is down for maintenance.", "text/plain")
                return
            if self.headers.get("Content-Type") != "application/vnd.ims.lis.v1.score+json":
                self.answer(415, "a score is application/vnd.ims.lis.v1.score+json", "text/plain")
                return
            grades = Grades(LmsRequest(self), lms.platform, lms, link)
            result = grades.handle_resp(grades.handle_update_score, line_item_id=link)
            self.answer(result.code, json.dumps({"status": result.message}), "application/json")
        else:
            self.answer(404, "not found")

    def token(self):
        """The library checks the assertion's signature with the tool's JWKS, the grant and the
        scopes; the LMS checks besides whom the assertion names."""
        lms = self.lms
        try:
            claims = jwt.decode(self.form.get("client_assertion", ""), options={"verify_signature": False})
            if claims.get("iss") != CLIENT_ID or claims.get("sub") != CLIENT_ID or claims.get("aud") != lms.url + "/token":
                raise ValueError(f"the assertion names iss {claims.get('iss')}, sub {claims.get('sub')}, aud {claims.get('aud')}")
            answer = lms.platform.get_access_token(self.form)
        except Exception as error:  # noqa: BLE001 (whatever the library refused: the tool is not let in)
            lms.tokens.append({"refused": f"{type(error).__name__}: {error}"})
            self.answer(401, json.dumps({"error": "invalid_client", "error_description": f"{type(error).__name__}: {error}"}),
                        "application/json")
            return
        lms.tokens.append({"scope": answer["scope"]})
        self.answer(200, json.dumps(answer), "application/json")

