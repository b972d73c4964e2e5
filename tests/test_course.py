"""A course on a real JupyterHub (course/): the hub, its proxy, DockerSpawner, NativeAuthenticator
and the idle culler on this machine's Docker engine, the course's RabbitMQ 4.3 shared by every
learner, each learner's lab one container of the learner image, and real Chromium."""

import pytest
from playwright.sync_api import expect

from browserkit import needs_chromium
from consolepage import (clear_terminal, expected_screen, open_console, run_command, verdict_rows,
                         wait_for_screen, walk_unit_2)
from coursekit import Course, log_in_page, names
from stackkit import require_engine

pytestmark = [pytest.mark.containers, needs_chromium]

ADA, BOB = "ada", "Bob.Smith"  # the hub keeps names in lower case: bob.smith


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    require_engine()
    course = Course(tmp_path_factory.mktemp("course"), NIGHTJAR_COURSE_IDLE_SECONDS="3600")
    try:
        course.up()
        yield course
    finally:
        course.down()


@pytest.fixture(scope="module")
def learners(course):
    sessions = {name: course.learner(name) for name in (ADA, BOB)}
    for session in sessions.values():
        course.start_lab(session.name)
    return sessions


def in_lab(course, name, *command):
    """A command in the learner's lab, as the learner's user: what their terminal can do."""
    return course.docker("exec", "--user", "1000", names(name).container, *command)


def test_each_learner_has_a_lab_of_their_own_behind_the_hubs_login(course, learners, browser):
    ada, bob = learners[ADA], learners[BOB]
    assert bob.name == "bob.smith"
    pages = {}
    for session in (ada, bob):
        context = browser.new_context()
        page = log_in_page(context, course, session.name, session.password)
        open_console(page, course.lab_url(session.name))
        pages[session.name] = page
        prompt = clear_terminal(page)
        run_command(page, prompt, "echo $NIGHTJAR_AMQP_URL | cut -d@ -f2")
        wait_for_screen(page, lambda lines: names(session.name).vhost in lines[-2])
    # Ada's login on Bob's lab: the hub's login does not open another learner's lab.
    answer = pages[ADA].goto(course.lab_url("bob.smith"))
    assert answer.status == 403, answer.status
    api = pages[ADA].request.get(course.lab_url("bob.smith") + "api/units")
    assert api.status == 403
    # Nothing of the lab answers without a login, and the page asks the hub to log in first.
    stranger = browser.new_context()
    assert stranger.request.get(course.lab_url("ada") + "api/units").status == 403
    page = stranger.new_page()
    page.goto(course.lab_url("ada"))
    expect(page).to_have_url(f"{course.url}/hub/login?next=" + "%2Fhub%2Fapi%2Foauth2%2Fauthorize"
                             + page.url.split("%2Fhub%2Fapi%2Foauth2%2Fauthorize", 1)[1])


def test_a_learners_terminal_reaches_nothing_of_the_others(course, learners):
    bob = names("bob.smith")
    refused = in_lab(course, "ada", "python3", "-c", f"""
import os, socket, pika, urllib.parse
url = urllib.parse.urlsplit(os.environ["NIGHTJAR_AMQP_URL"])
for vhost in ("{bob.vhost}", "/"):
    try:
        pika.BlockingConnection(pika.URLParameters(url._replace(path="/" + urllib.parse.quote(vhost, safe="")).geturl()))
        print("opened", vhost)
    except pika.exceptions.AMQPError as error:
        print("refused", vhost)
for host, port in (("{bob.container}", 8888), ("{course.project}-hub", 8081)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("reached", host)
    except OSError:
        print("unreachable", host)
print("docker socket" if os.path.exists("/var/run/docker.sock") else "no docker socket")
print("hub files" if os.path.exists("/srv/jupyterhub") else "no hub files")
""")
    assert refused.stdout.splitlines() == [
        f"refused {bob.vhost}", "refused /",
        f"unreachable {bob.container}",
        f"reached {course.project}-hub",  # the hub's API: every single-user server needs it
        "no docker socket", "no hub files"], refused.stdout + refused.stderr


def test_a_lab_stopped_and_started_again_keeps_handler_py_and_the_live_database(course, learners):
    marked = in_lab(course, "ada", "bash", "-c",
                    "echo '# mine' >> handler.py && python3 desk.py register 'Kept guest'")
    assert marked.returncode == 0, marked.stdout + marked.stderr
    registered = marked.stdout.split()[1]
    course.stop_lab("ada")
    course.start_lab("ada")
    tail = in_lab(course, "ada", "tail", "-n", "1", "handler.py")
    assert tail.stdout == "# mine\n"
    status = in_lab(course, "ada", "python3", "desk.py", "status").stdout.splitlines()
    # Still queued on the course's broker, and still waiting for its ticket in the live database.
    assert f"  {registered}  Kept guest  no ticket       no              ! waiting for its ticket" in status
    assert status[-1] == "Queue nightjar.tickets: 1 ready, 0 unacknowledged, 0 dead-lettered (in nightjar.tickets.dead)"


def test_two_learners_walk_unit_2_and_grade_on_the_farm(course, learners, browser):
    """Each in their own page: Ctrl+C gives 130, then redelivered=True, Check says done, and
    Grade shows the farm's verdicts. Then the instructor's page shows both."""
    for session in learners.values():
        page = log_in_page(browser.new_context(), course, session.name, session.password)
        shown, prompt, registration_id, verdict = walk_unit_2(page, course.lab_url(session.name))
        assert shown == expected_screen(prompt, registration_id)
        assert verdict_rows(page) == [(check["name"], "PASS" if check["passed"] else "FAIL")
                                      for check in verdict["checks"]]
        # Unit 2's handler acks after the commit but is not idempotent yet: check 4 fails.
        assert [check["passed"] for check in verdict["checks"]] == [True, True, True, False, True, False]

    instructor = log_in_page(browser.new_context(), course, "instructor",
                             (course.folder / "var" / "instructor-password").read_text().strip())
    instructor.goto(f"{course.url}/services/nightjar/")
    rows = instructor.locator("table tr").all()[1:]
    assert [row.locator("th").inner_text() for row in rows] == ["ada", "bob.smith"]
    for row in rows:
        cells = row.locator("td").all_inner_texts()
        assert cells[0:2] == ["running", "2"], cells
        assert cells[2].startswith("FAIL 4/6 at "), cells
        assert "4. Interrupted after the commit" in cells[3], cells
    instructor.get_by_role("button", name="Grade all").click()
    expect(instructor.get_by_role("status")).to_have_text(
        "Graded 2 learners' handler.py on the farm.", timeout=300_000)
    report = instructor.request.get(f"{course.url}/services/nightjar/report.csv")
    assert report.status == 200
    assert [line.split(",")[0] for line in report.text().splitlines()[1:]] == ["ada", "bob.smith"]
    # A learner's login does not open the instructor's page.
    learner_page = log_in_page(browser.new_context(), course, "ada", learners[ADA].password)
    assert learner_page.goto(f"{course.url}/services/nightjar/").status == 403
