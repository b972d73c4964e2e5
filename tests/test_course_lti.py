"""The course launched from its LMS and graded back into it (LTI 1.3 with AGS): a course of its
own (test_course.py's course tells the story of a class of exactly three learners, whose report
and culler leave no room for others), registered with tests/lmskit.py's LMS, on lti1p3platform,
on docker0's address, where the browser, the hub and the course's service reach it. The tests run
in order: a learner's story goes on from one to the next.

A learner clicks the LMS's launch and lands in their lab, its terminal answers, Grade gives the
verdict, and the LMS holds the score for the launch's `sub`; an instructor's launch lands on the
class page, whose Grade all sends every score; a refused send is shown there and delivered by
the retry, once; a launch shown inside the LMS's page offers a new window; and forged, foreign
or replayed launches are refused with a page that says why, and no login. (The instructor's own
login, the hub's form, is the course fixture's: coursekit's Course.up logs in with it.)"""

import json
import re
import time
from urllib.parse import urlsplit

import pytest
import requests
from playwright.sync_api import expect

from browserkit import needs_chromium
from consolepage import clear_terminal, console_ready, run_command, screen, verdict_rows
from coursekit import Course
from lmskit import Lms, docker0_address, new_key
from stackkit import require_engine

pytestmark = [pytest.mark.containers, needs_chromium]

RETRY_SECONDS = 10  # the service's first wait before it sends a refused score again
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"


@pytest.fixture(scope="module")
def lms():
    address = docker0_address()
    if address is None:
        pytest.skip("no docker0 address: the course's containers could not reach the test LMS")
    lms = Lms(address).start()
    yield lms
    lms.stop()


@pytest.fixture(scope="module")
def course(tmp_path_factory, lms):
    """A course with the LMS's NIGHTJAR_LTI_* settings (and a short first retry), registered there."""
    require_engine()
    course = Course(tmp_path_factory.mktemp("course"), **lms.course_settings(),
                    NIGHTJAR_LTI_RETRY_SECONDS=str(RETRY_SECONDS))
    try:
        course.up()
        lms.register_tool(course.url)  # its address once up (a port taken meanwhile moves it)
        yield course
    finally:
        course.down()


def launch(browser, course, lms, who, link="unit-2"):
    """A browser page of the LMS's user `who`, who clicks the course page's launch of `link`."""
    page = browser.new_context().new_page()
    page.goto(f"{lms.url}/course?as={who}")
    page.get_by_role("link", name=f"Nightjar lab: {lms.links[link]}").click()
    return page


def landed_in_own_lab(page, course):
    """The launch led to the learner's lab (the hub started it): their hub name, from its URL."""
    console_ready(page, timeout=120)
    found = re.fullmatch(re.escape(course.url) + r"/user/([^/]+)/.*", page.url)
    assert found, page.url
    course.learners.append(found.group(1))  # its volume goes with the course
    return found.group(1)


def service_rows(course, sql):
    """Rows of the course service's database, as its container reads them."""
    script = (f"import json, sqlite3; db = sqlite3.connect('/srv/nightjar-service/course.sqlite');"
              f" print(json.dumps(db.execute({sql!r}).fetchall()))")
    done = course.docker("exec", f"{course.project}-service", "python3", "-c", script)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def scores_of(lms, sub):
    return [score for score in lms.scores if score["userId"] == sub]


def wait_for(condition, seconds=60):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.2)


def grade(page, caption):
    page.get_by_role("button", name="Grade handler.py").click()
    expect(page.locator("#grade-result caption")).to_have_text(caption, timeout=300_000)
    return verdict_rows(page)


def test_the_tool_configuration_names_the_courses_jwks(course, lms):
    config = requests.get(course.url + "/hub/lti13/config", timeout=30).json()
    assert config["public_jwk_url"] == course.url + "/services/nightjar/lti/jwks"
    assert (config["target_link_uri"], config["oidc_initiation_url"], config["redirect_uris"]) == (
        course.url + "/hub", course.url + "/hub/lti13/oauth_login", [course.url + "/hub/lti13/oauth_callback"])
    jwks = requests.get(config["public_jwk_url"], timeout=30).json()
    key_file = course.folder / "var" / "lti" / "tool-key.pem"
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert [(key["kty"], key["alg"], "d" in key) for key in jwks["keys"]] == [("RSA", "RS256", False)]


def test_a_learner_launched_from_the_lms_lands_in_their_lab_and_their_grade_goes_back(course, lms, browser):
    mina = lms.person("mina")
    page = launch(browser, course, lms, "mina")
    name = landed_in_own_lab(page, course)
    assert name.startswith("lti-")
    prompt = clear_terminal(page)
    run_command(page, prompt, "echo launched from the LMS")
    assert screen(page)[-2] == "launched from the LMS"
    rows = grade(page, "Some checks failed.")  # the starting handler.py
    wait_for(lambda: scores_of(lms, mina["sub"]))
    (score,) = scores_of(lms, mina["sub"])
    failed = [check for check, state in rows if state == "FAIL"]
    assert (score["link"], score["scoreGiven"], score["scoreMaximum"]) == ("unit-2", len(rows) - len(failed), len(rows))
    assert score["comment"] == f"{len(rows) - len(failed)} of {len(rows)} checks passed. Failed: {'; '.join(failed)}."
    assert (score["activityProgress"], score["gradingProgress"]) == ("Submitted", "FullyGraded")
    # Launched again, from the other assignment: the same hub user; the last verdict goes there too.
    page.goto(f"{lms.url}/course?as=mina")
    page.get_by_role("link", name=f"Nightjar lab: {lms.links['unit-3']}").click()
    console_ready(page, timeout=120)
    assert page.url.startswith(course.lab_url(name))
    wait_for(lambda: len(scores_of(lms, mina["sub"])) == 2)
    assert scores_of(lms, mina["sub"])[1]["link"] == "unit-3"
    # Every launch kept by the service, with what grades go back by.
    launches = service_rows(course, "SELECT hub_user, sub, issuer, client_id, deployment_id, context_id,"
                                    " resource_link_id, lineitem, scopes FROM lti_launches ORDER BY id")
    assert [row[:8] for row in launches if row[1] == mina["sub"]] == [
        [name, mina["sub"], lms.url, "nightjar-tool-1", "deployment-1", "ds-101", link, lms.lineitem(link)]
        for link in ("unit-2", "unit-3")]
    assert "https://purl.imsglobal.org/spec/lti-ags/scope/score" in json.loads(launches[-1][8])
    page.context.close()


def instructors_page(browser, course, lms):
    """The LMS's instructor, launched: the class page (course staff, not a learner)."""
    if "prof" not in lms.users:
        lms.person("prof", roles=("Instructor",))
    page = launch(browser, course, lms, "prof")
    expect(page).to_have_url(f"{course.url}/services/nightjar/", timeout=30_000)
    return page


def delivered_everywhere(course, lms):
    """Whether the LMS holds every launched learner's current score at each of their line items:
    the service has nothing left to send, and the LMS's last score for each is the service's."""
    wanted = service_rows(course, "SELECT lineitem, sub, score, state FROM lti_sends")
    last = {(score["link"], score["userId"]): score for score in lms.scores}
    return bool(wanted) and all(
        state == "sent" and json.loads(score) == {
            name: value for name, value in last.get((urlsplit(lineitem).path.split("/")[2], sub), {}).items()
            if name not in ("link", "userId", "timestamp")}
        for lineitem, sub, score, state in wanted)


def test_an_instructors_launch_lands_on_the_class_page_whose_grade_all_sends_every_score(course, lms, browser):
    leo = lms.person("leo")
    page = launch(browser, course, lms, "leo", "unit-3")
    leo_name = landed_in_own_lab(page, course)
    staff = instructors_page(browser, course, lms)
    # The LMS's instructor is course staff, not a learner of the class.
    # (The page draws its rows as the service hears of the hub's learners, every few seconds.)
    expect(staff.locator("#rows tr", has_text=leo_name)).to_have_count(1)
    prof = service_rows(course, "SELECT hub_user FROM lti_launches WHERE roles LIKE '%Instructor%'")[0][0]
    expect(staff.locator("#rows tr", has_text=prof)).to_have_count(0)
    staff.get_by_role("button", name="Grade all").click()
    expect(staff.locator("#grade-note")).to_contain_text("Graded ", timeout=300_000)
    wait_for(lambda: scores_of(lms, leo["sub"]) and delivered_everywhere(course, lms))
    assert [score["link"] for score in scores_of(lms, leo["sub"])] == ["unit-3"]  # Leo's first Grade
    page.context.close()
    staff.context.close()


def test_a_refused_send_is_shown_on_the_class_page_and_the_retry_delivers_it_once(course, lms, browser):
    staff = instructors_page(browser, course, lms)
    section = staff.locator("#lti-grades")
    (sends,) = service_rows(course, "SELECT count(*) FROM lti_sends")[0]  # Mina's two, Leo's one
    posts = len(lms.score_posts)
    lms.refuse_scores = 1  # the LMS is down for the first of them
    with staff.expect_navigation():  # the form's answer is loaded before the page is reloaded below
        staff.get_by_role("button", name="Send all again").click()
    wait_for(lambda: len(lms.score_posts) == posts + sends)
    refused = lms.score_posts[posts]
    staff.reload()  # within the first wait: the refused score waits for its retry
    person = lms.users[next(name for name, user in lms.users.items() if user["sub"] == refused["body"]["userId"])]
    row = section.locator("table tr", has_text=person["name"])
    expect(row).to_contain_text("503 The gradebook is down for maintenance.")
    expect(row).to_contain_text(lms.links[refused["link"]])
    expect(row).to_contain_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"))  # when it was tried
    wait_for(lambda: len(lms.score_posts) == posts + sends + 1, RETRY_SECONDS * 3)
    time.sleep(3)
    assert len(lms.score_posts) == posts + sends + 1  # the retry delivered it, once
    retried = lms.score_posts[-1]
    assert (retried["link"], retried["body"]["userId"]) == (refused["link"], refused["body"]["userId"])
    assert delivered_everywhere(course, lms)
    staff.reload()
    expect(section.locator("#lti-counts")).to_contain_text(f"{sends} delivered, 0 waiting to be sent, 0 refused")
    expect(section.locator("table")).to_have_count(0)
    staff.get_by_role("button", name="Send grades").click()  # nothing changed since: nothing to send
    time.sleep(2)
    assert len(lms.score_posts) == posts + sends + 1
    staff.context.close()


def test_a_launch_shown_inside_the_lms_page_opens_in_a_new_window(course, lms, browser):
    page = browser.new_context().new_page()
    page.goto(f"{lms.url}/course?as=mina")
    page.goto(f"{lms.url}/framed?link=unit-2")
    frame = page.frame_locator("iframe")
    expect(frame.get_by_role("heading", name="Nightjar opens in a window of its own")).to_be_visible()
    with page.context.expect_page() as opened:
        frame.get_by_role("link", name="Open the lab in a new window").click()
    console_ready(opened.value, timeout=120)
    assert opened.value.url.startswith(course.url + "/user/lti-")
    page.context.close()


def launch_form(session, lms, who, link="unit-2"):
    """The LMS's launch, driven without a browser: the id_token and state its form would post."""
    session.get(f"{lms.url}/course?as={who}", timeout=30)
    answer = session.get(f"{lms.url}/launch/{link}", timeout=30)
    return dict(re.findall(r'name="(id_token|state)" value="([^"]+)"', answer.text))


def post_launch(session, course, form):
    """(status, what the hub's page says) of the form posted to the hub."""
    answer = session.post(course.url + "/hub/lti13/oauth_callback", data=form, allow_redirects=False, timeout=30)
    said = re.search(r"<p>\s*(.*?)\s*</p>", answer.text, re.S)
    return answer.status_code, said.group(1).replace("&#39;", "'") if said else answer.headers.get("Location")


def test_forged_foreign_expired_and_replayed_launches_are_refused_with_no_login(course, lms):
    eve = lms.person("eve")
    refused = {}
    for case, change, in (
            ("another audience", lambda: lms.next_claims.update(aud="another-tool")),
            ("an unknown deployment", lambda: lms.next_claims.update({CLAIM + "deployment_id": "deployment-9"})),
            ("an expired token", lambda: setattr(lms, "next_expires_in", -120)),
            ("a bad signature", lambda: setattr(lms, "next_key", new_key()[0]))):
        session = requests.Session()
        change()
        refused[case] = post_launch(session, course, launch_form(session, lms, "eve"))
    assert refused == {
        "another audience": (401, "Audience doesn't match"),
        "an unknown deployment": (403, "This course takes launches from its own deployment in the LMS,"
                                       " not from deployment 'deployment-9'."),
        "an expired token": (400, "Signature has expired"),
        "a bad signature": (400, "Signature verification failed")}
    users = {user["name"] for user in course.api("GET", "users", expect_status=200)}
    # A launch posted twice: without its cookies (they go with the first post), then with them.
    session = requests.Session()
    form = launch_form(session, lms, "eve")
    cookies = session.cookies.copy()
    assert post_launch(session, course, form)[0] == 302  # Eve's one login
    assert post_launch(session, course, form) == (400, "OAuth state missing from cookies")
    thief = requests.Session()
    thief.cookies.update(cookies)
    assert post_launch(thief, course, form) == (
        400, "This launch was used already (its nonce came again): launch again from the LMS.")
    # A launch from another LMS, or of another deployment, is refused at its start.
    start = course.url + "/hub/lti13/oauth_login"
    for issuer, deployment, why in (("https://lms.example.org", "deployment-1", "This course takes launches from"
                                     f" {lms.url} only, not from https://lms.example.org."),
                                    (lms.url, "deployment-9", "This course takes launches from its own deployment"
                                     " in the LMS, not from deployment 'deployment-9'.")):
        answer = requests.get(start, params={"iss": issuer, "login_hint": "eve", "target_link_uri": course.url + "/hub",
                                             "lti_deployment_id": deployment}, timeout=30)
        assert (answer.status_code, re.search(r"<p>\s*(.*?)\s*</p>", answer.text, re.S).group(1).replace("&#39;", "'")) \
            == (403, why)
    after = {user["name"] for user in course.api("GET", "users", expect_status=200)}
    assert len(after - users) == 1  # Eve, from her one launch; none from the refused ones
    # Under https (a TLS proxy in front of the hub says so), the state cookies go with the LMS's
    # cross-site post in every browser.
    answer = requests.get(start, params={"iss": lms.url, "login_hint": "eve", "target_link_uri": course.url + "/hub"},
                          headers={"X-Forwarded-Proto": "https"}, allow_redirects=False, timeout=30)
    cookies = answer.raw.headers.getlist("Set-Cookie")
    assert sorted(cookie.split("=")[0] for cookie in cookies) == ["lti13authenticator-nonce-state",
                                                                  "lti13authenticator-state"]
    assert all("; SameSite=None" in cookie and "; Secure" in cookie for cookie in cookies), cookies
    shown = course.docker("logs", course.hub_container)
    log = shown.stdout + shown.stderr
    assert "LTI launch refused (403): This course takes launches from its own deployment" in log
    assert "LTI launch refused (400): This launch was used already" in log
