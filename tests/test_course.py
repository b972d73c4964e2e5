"""A course on a real JupyterHub (course/): the hub, its proxy, DockerSpawner, NativeAuthenticator
and the idle culler on this machine's Docker engine, the course's RabbitMQ 4.3 shared by every
learner, each learner's lab one container of the learner image, the course's grading farm, and
real Chromium. The tests share one course and run in order: a lab's story goes on from one to
the next (its files, its tabs), as a learner's would."""

import datetime
import ipaddress
import json
import os
import re
import sys
import time

import pytest
from playwright.sync_api import expect

from browserkit import document_screenshot, needs_chromium
from consolepage import (clear_terminal, expected_screen, open_console, run_command, screen,
                         unanswered_links, verdict_rows, walk_unit_2)
pytest.register_assert_rewrite("classpage")  # its asserts say what differed, as a test module's do
from classpage import IDLE_SIGNAL_SECONDS, delivered, instructors_page, keep_working, worker_runs  # noqa: E402
from coursekit import Course, in_lab, in_url, landed_in_lab, log_in_page
from stackkit import ROOT, require_engine

sys.path.insert(0, str(ROOT / "benchmarks"))
from console_bench import measure_typing, percentile  # noqa: E402

pytestmark = [pytest.mark.containers, needs_chromium]

# Learners as they sign up; the hub keeps names in lower case (bob.smith). Zoë opens her lab
# and leaves its tab open without doing anything in it; her name is in her lab's URL
# (/user/zo%C3%AB.lee@example.org/), and her names for Docker and RabbitMQ are made from it.
ADA, BOB, ZOE = "ada", "Bob.Smith", "Zoë.Lee@example.org"
zoe = ZOE.lower()
IDLE_SECONDS = 120  # the culler's limit here: short (Ada and Bob are kept at work: ada_and_bob_at_work)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    require_engine()
    course = Course(tmp_path_factory.mktemp("course"), NIGHTJAR_COURSE_IDLE_SECONDS=str(IDLE_SECONDS),
                    NIGHTJAR_COURSE_CULL_EVERY="10", NIGHTJAR_COURSE_ACTIVITY_SECONDS="5",
                    NIGHTJAR_COURSE_IDLE_SIGNAL_SECONDS=str(IDLE_SIGNAL_SECONDS))
    try:
        course.up()
        yield course
    finally:
        course.down()


@pytest.fixture(scope="module")
def learners(course):
    sessions = {name: course.learner(name) for name in (ADA, BOB, ZOE)}
    for session in sessions.values():
        course.start_lab(session.name)
    return {session.name: session for session in sessions.values()}


@pytest.fixture(scope="module")
def pages(course, learners, browser):
    """Each learner's console in a tab of their own browser, kept open from test to test."""
    opened = {}
    for name, session in learners.items():
        page = log_in_page(browser.new_context(), course, name, session.password)
        landed_in_lab(page, course, name)  # a learner's login lands in their lab
        opened[name] = page
    return opened


def running(course, name):
    return bool((course.api("GET", f"users/{in_url(name)}") or {}).get("servers"))


@pytest.fixture(autouse=True)
def ada_and_bob_at_work(course, learners):
    """Ada and Bob are in class from test to test: before each, the hub hears of their work as
    their consoles tell it when they type, and a lab the culler stopped meanwhile starts again;
    a slow machine's tests leave neither lab to the culler. Zoë alone stays idle, for its test."""
    for name in ("ada", "bob.smith"):
        stamp = datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")
        course.api("POST", f"users/{in_url(name)}/activity",
                   {"last_activity": stamp, "servers": {"": {"last_activity": stamp}}})
        if not running(course, name):  # stopped before (or as) the hub heard of it
            course.start_lab(name)


def test_each_learner_has_a_lab_of_their_own_behind_the_hubs_login(course, learners, pages, browser):
    assert sorted(learners) == ["ada", "bob.smith", zoe]
    assert course.names(zoe).container.startswith(f"{course.project}-zoe-lee-example-org-")
    for name in ("ada", "bob.smith", zoe):
        prompt = clear_terminal(pages[name])
        run_command(pages[name], prompt, "echo $NIGHTJAR_AMQP_URL | cut -d@ -f2")
        assert screen(pages[name])[-2] == f"{course.project}-broker:5672/{course.names(name).vhost}"
    # Ada's login on Bob's lab: the hub's login does not open another learner's lab.
    ada = pages["ada"]
    assert ada.request.get(course.lab_url("bob.smith")).status == 403
    assert ada.request.get(course.lab_url("bob.smith") + "api/units").status == 403
    # Without a login nothing of a lab answers, and its page sends the browser to the hub's login.
    stranger = browser.new_context()
    assert stranger.request.get(course.lab_url("ada") + "api/units").status == 403
    assert stranger.request.get(course.lab_url("ada") + "site/", max_redirects=0).status == 302
    page = stranger.new_page()
    page.goto(course.lab_url("ada"))
    expect(page).to_have_url(re.compile(re.escape(f"{course.url}/hub/login?next=")))
    # The learner's Nightjar and management UI, through the hub: no host port of their own.
    site = ada.request.get(course.lab_url("ada") + "site/")
    assert site.status == 200 and "Nightjar Print Studio" in site.text()
    management = ada.request.get(course.lab_url("ada") + "rabbitmq/")
    assert management.status == 200 and "<title>RabbitMQ Management</title>" in management.text()
    user, password = ada.locator("#management-login code").all_inner_texts()
    overview = ada.request.get(course.lab_url("ada") + "rabbitmq/api/vhosts",
                               headers={"Authorization": "Basic " + basic(user, password)})
    assert [vhost["name"] for vhost in overview.json()] == [course.names("ada").vhost]


def basic(user, password):
    import base64
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def test_every_link_a_learners_page_and_the_instructors_page_offer_answers(course, learners, pages, browser):
    """Through the hub, behind its login: Nightjar and the management UI from the console,
    the class report and its CSV from the instructor's page."""
    page = pages["bob.smith"]
    expect(page.locator("#site-link")).to_have_attribute("href", "/user/bob.smith/site/")
    expect(page.locator("#management-link")).to_have_attribute("href", "/user/bob.smith/rabbitmq/")
    assert unanswered_links(page) == {}
    instructor = instructors_page(course, browser)
    expect(instructor.get_by_role("link", name="Class report")).to_be_visible()
    assert unanswered_links(instructor) == {}
    instructor.context.close()


def test_a_learners_terminal_reaches_nothing_of_the_others(course, learners):
    bob = course.names("bob.smith")
    reached = in_lab(course, "ada", "python3", "-c", f"""
import os, socket, pika, urllib.parse
url = urllib.parse.urlsplit(os.environ["NIGHTJAR_AMQP_URL"])
for vhost in ("{bob.vhost}", "/"):
    try:
        pika.BlockingConnection(pika.URLParameters(url._replace(path="/" + urllib.parse.quote(vhost, safe="")).geturl()))
        print("opened", vhost)
    except pika.exceptions.AMQPError as error:
        print("refused", vhost)
for host, port in (("{bob.container}", 8888), ("{course.project}-service", 9000),
                   ("{course.project}-farm-broker-1", 5672), ("farm-broker", 5672),
                   ("{course.project}-hub", 8081)):
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("reached", host)
    except OSError:
        print("unreachable", host)
print("docker socket" if os.path.exists("/var/run/docker.sock") else "no docker socket")
print("hub files" if os.path.exists("/srv/jupyterhub") else "no hub files")
""")
    assert reached.stdout.splitlines() == [
        f"refused {bob.vhost}", "refused /",
        f"unreachable {bob.container}", f"unreachable {course.project}-service",
        f"unreachable {course.project}-farm-broker-1", "unreachable farm-broker",
        f"reached {course.project}-hub",  # the hub's API, which every single-user server needs
        "no docker socket", "no hub files"], reached.stdout + reached.stderr


def test_each_lab_has_a_network_of_16_addresses_of_the_courses_range(course, learners):
    """Not a pool of the engine's own, of which Docker has about 30."""
    subnets = []
    for name in learners:
        inspected = json.loads(course.docker("network", "inspect", course.network(name)).stdout)
        subnets += [ipaddress.ip_network(config["Subnet"]) for config in inspected[0]["IPAM"]["Config"]]
    assert len(set(subnets)) == len(learners) == 3
    course_range = ipaddress.ip_network(os.environ.get("NIGHTJAR_COURSE_SUBNETS", "10.77.0.0/16"))
    assert all(subnet.prefixlen == 28 and subnet.subnet_of(course_range)
               for subnet in subnets), subnets


def test_a_lab_stopped_and_started_again_keeps_handler_py_and_the_live_database(course, learners, pages):
    marked = in_lab(course, "ada", "bash", "-c",
                    "echo '# mine' >> handler.py && python3 desk.py register 'Kept guest'")
    assert marked.returncode == 0, marked.stdout + marked.stderr
    registered = marked.stdout.split()[1]
    course.stop_lab("ada")
    course.start_lab("ada")
    assert in_lab(course, "ada", "tail", "-n", "1", "handler.py").stdout == "# mine\n"
    status = in_lab(course, "ada", "python3", "desk.py", "status").stdout.splitlines()
    # Still queued on the course's broker, and still waiting for its ticket in the live database.
    assert f"  {registered}  Kept guest  no ticket       no              ! waiting for its ticket" in status
    assert status[-1] == "Queue nightjar.tickets: 1 ready, 0 unacknowledged, 0 dead-lettered (in nightjar.tickets.dead)"
    # Ada's open tab finds her lab again by itself.
    expect(pages["ada"].locator("#terminal-status")).to_contain_text("Connected to the Workstation",
                                                                     timeout=60_000)


def test_two_learners_walk_unit_2_and_grade_on_the_farm(course, learners, pages, browser):
    """Each in their own page: Ctrl+C gives 130, then redelivered=True, Check says done, and
    Grade shows the farm's verdicts. Then the instructor's page shows both."""
    for name in ("ada", "bob.smith"):
        page = pages[name]
        shown, prompt, registration_id, verdict = walk_unit_2(page, course.lab_url(name))
        assert shown == expected_screen(prompt, registration_id)
        assert verdict_rows(page) == [(check["name"], "PASS" if check["passed"] else "FAIL")
                                      for check in verdict["checks"]]
        # Unit 2's handler acks after the commit but is not idempotent yet: checks 4 and 6 fail.
        assert [check["passed"] for check in verdict["checks"]] == [True, True, True, False, True, False], \
            [(check["name"], check["reason"]) for check in verdict["checks"]]

    instructor = instructors_page(course, browser)
    expect(instructor).to_have_url(f"{course.url}/services/nightjar/")  # the instructor's login lands here
    # Ctrl+C's redelivery in unit 2 is the lesson: no signal, on anyone.
    rows = instructor.locator("#rows tr").all()
    assert [row.locator("th").inner_text() for row in rows] == ["ada", "bob.smith", zoe]
    for row in rows[:2]:
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == "running" and cells[1].startswith("unit 2\nsince "), cells
        assert cells[2].startswith("done unit 2 ") and cells[3] == "2", cells
        assert cells[4].startswith("FAIL 4/6 ") and "4. Interrupted after the commit" in cells[4], cells
        assert cells[6] == "", cells
    assert rows[2].locator("td").all_inner_texts()[1:5] == ["none set up", "none yet", "none yet", "not graded yet"]
    # What a person sees: each lab's state on one line of its cell, never broken inside the word.
    lines = instructor.locator("#rows td.state").evaluate_all(
        "cells => cells.map(cell => { const all = document.createRange(); all.selectNodeContents(cell);"
        " return all.getClientRects().length; })")
    assert lines == [1, 1, 1], lines
    expect(instructor.locator("#shared")).to_have_text("nothing yet")
    instructor.get_by_role("button", name="Grade all").click()
    # It grades in the background: the page says so, and shows each verdict as it comes.
    expect(instructor.get_by_role("button", name="Grade all")).to_be_disabled()
    expect(instructor.locator("#grade-note")).to_contain_text("Each verdict shows here as it comes.")
    expect(instructor.locator("#grade-note")).to_have_text(
        "Graded 3 learners' handler.py on the farm.", timeout=300_000)
    expect(instructor.get_by_role("button", name="Grade all")).to_be_enabled()
    # The failed checks' stories included, the page is no wider than the browser's window.
    assert instructor.evaluate("document.documentElement.scrollWidth <= innerWidth")
    document_screenshot(instructor, "course-instructors-page")  # the documentation's pictures
    class_report = instructor.context.new_page()
    class_report.goto(f"{course.url}/services/nightjar/report.html")
    document_screenshot(class_report, "course-class-report", whole=False)  # its chart and first group
    class_report.close()
    # Zoë's starting handler.py acknowledges before it writes: check 2 fails.
    found = instructor.locator("#rows tr", has_text=zoe).locator("td").all_inner_texts()
    assert found[4].startswith("FAIL ") and "2. Interrupted before the write" in found[4], found
    report = instructor.request.get(f"{course.url}/services/nightjar/report.csv")
    assert report.status == 200
    assert [line.split(",")[0] for line in report.text().splitlines()[1:]] == ["ada", "bob.smith", zoe]
    # A learner's login does not open the instructor's page.
    assert pages["ada"].request.get(f"{course.url}/services/nightjar/").status == 403


# The class page's tests run here, on this course, after unit 2's walk (tests/classpage.py).
from classpage import (  # noqa: E402,F401
    test_the_class_page_shows_each_signal_on_its_learner_within_3_s,
    test_the_instructor_looks_close_at_one_learner_who_sees_it_and_a_word_reaches_the_class,
    test_a_learners_token_opens_nothing_of_the_staffs_and_forges_no_event)


def echo_p95(page, keys=30):
    """Keystroke to echo in the page's terminal, 95th percentile, in milliseconds
    (benchmarks/console_bench.py's own measure)."""
    return percentile(measure_typing(page, keys), 0.95)


def test_a_fork_bomb_and_a_memory_hog_in_one_lab_leave_the_others_as_they_were(course, learners, pages):
    quiet = echo_p95(pages["bob.smith"])
    hog = in_lab(course, "ada", "python3", "-c", "chunks = []\nwhile True: chunks.append(bytearray(64 << 20))")
    assert hog.returncode == 137, hog  # killed for memory, in Ada's lab alone
    bomb = course.docker("exec", "-d", "--user", "1000", course.names("ada").container, "bash", "-c",
                         "bomb() { bomb | bomb & }; bomb")
    assert bomb.returncode == 0
    time.sleep(3)  # the bomb at its pids limit, taking the CPU its lab may have
    busy = echo_p95(pages["bob.smith"])
    assert busy <= max(2 * quiet, 50), (quiet, busy)
    # Bob's Grade, on the farm, gives the verdicts it gave before.
    pages["bob.smith"].get_by_role("button", name="Grade handler.py").click()
    expect(pages["bob.smith"].locator("#grade-result caption")).to_have_text("Some checks failed.",
                                                                             timeout=300_000)
    assert [state for _, state in verdict_rows(pages["bob.smith"])] == [
        "PASS", "PASS", "PASS", "FAIL", "PASS", "FAIL"]
    pids = course.docker("inspect", "-f", "{{.HostConfig.PidsLimit}}", course.names("ada").container)
    assert pids.stdout.strip() == "256"
    course.stop_lab("ada")  # the way out of a fork bomb: the lab stops; its files stay
    course.start_lab("ada")
    assert in_lab(course, "ada", "tail", "-n", "1", "handler.py").stdout != ""


def test_the_hub_restarts_while_the_labs_run(course, learners, pages):
    before = course.docker("inspect", "-f", "{{.Id}}", course.names("bob.smith").container).stdout
    assert course.docker("stop", course.hub_container, timeout=120).returncode == 0
    # Meanwhile Bob's worker takes a registration: his lab keeps its events until the hub is back.
    meanwhile = worker_runs(course, "bob.smith", 1, "true")
    assert course.docker("start", course.hub_container, timeout=120).returncode == 0
    course.wait_for_hub()
    assert delivered(course, "bob.smith", meanwhile)["deliveries"] == 1
    after = course.docker("inspect", "-f", "{{.Id}}", course.names("bob.smith").container).stdout
    assert after == before  # the same lab, never stopped
    page = pages["bob.smith"]
    expect(page.locator("#terminal-status")).to_have_text(
        "Connected to the Workstation: the same shell as before.", timeout=60_000)
    prompt = clear_terminal(page)
    run_command(page, prompt, "echo still here")
    assert screen(page)[-2] == "still here"


def test_the_courses_rabbitmq_restarts_and_no_registration_is_lost(course, learners, pages):
    assert course.docker("stop", course.broker_container, timeout=120).returncode == 0
    site = pages["bob.smith"].context.new_page()
    site.goto(course.lab_url("bob.smith") + "site/evening")
    site.get_by_label("Guest name").fill("Broker down")
    site.get_by_role("button", name="Register for the evening").click()
    expect(site.locator("p.waiting")).to_have_text(
        "Waiting to be queued. The registration is saved; the site queues it once RabbitMQ confirms it.")
    registration = site.url.rsplit("/", 1)[1]
    assert course.docker("start", course.broker_container, timeout=120).returncode == 0
    # The page refreshes itself: the site queued the registration once RabbitMQ was back.
    expect(site.locator("section.status p")).to_have_text(
        "The registration is saved and queued. A worker turns it into a ticket; this page"
        " refreshes itself every 2 seconds.", timeout=120_000)
    taken = in_lab(course, "bob.smith", "python3", "worker.py")
    assert taken.stdout.splitlines()[0] == f"Received {registration} redelivered=False", taken
    # The lab's events go on reaching the course's service: the class page sees this delivery.
    assert delivered(course, "bob.smith", registration)["deliveries"] == 1


def test_a_killed_lab_comes_back_at_the_next_visit_with_its_files(course, learners, pages):
    container = course.names("bob.smith").container
    in_lab(course, "bob.smith", "bash", "-c", "echo '# before the kill' >> handler.py")
    assert course.docker("kill", container).returncode == 0
    deadline = time.monotonic() + 60
    while running(course, "bob.smith"):
        assert time.monotonic() < deadline, "the hub did not see the killed lab"
        time.sleep(1)
    page = pages["bob.smith"]
    open_console(page, course.lab_url("bob.smith"), timeout=120)  # the hub starts it again
    assert in_lab(course, "bob.smith", "tail", "-n", "1", "handler.py").stdout == "# before the kill\n"


def test_the_culler_stops_a_lab_left_idle_with_its_tab_open(course, learners, pages):
    # Zoë's tab has stayed open since the first test, its websocket answering the console's pings.
    # On a slow machine the tests between took longer than the culler's limit: then her visit
    # starts her lab again, and her idle time counts from now.
    if not running(course, zoe):
        open_console(pages[zoe], course.lab_url(zoe), timeout=120)
    # Ada works meanwhile, in her console opened anew (her lab may have started again since).
    open_console(pages["ada"], course.lab_url("ada"), timeout=120)
    expect(pages[zoe].locator("#terminal-status")).to_have_text(re.compile("^Connected"))
    deadline = time.monotonic() + IDLE_SECONDS + 60
    while running(course, zoe):
        assert time.monotonic() < deadline, "the culler left Zoë's idle lab running"
        keep_working(pages, "ada")  # Ada works meanwhile (on a cleared screen: the loop is long)
        time.sleep(5)
    assert running(course, "ada")
    # Her files stay; her next visit starts her lab again.
    open_console(pages[zoe], course.lab_url(zoe), timeout=120)


def test_a_learner_deleted_leaves_no_vhost_volume_or_network_behind(course):
    """The hub's deletion of a learner (its admin page, or its API as here) frees what was theirs:
    the RabbitMQ user and vhost, the volume, and the 16 addresses of their network."""
    course.learner("dora")
    course.start_lab("dora")
    dora = course.names("dora")

    def left():
        rabbitmqctl = ("exec", course.broker_container, "rabbitmqctl", "--silent")
        vhosts = course.docker(*rabbitmqctl, "list_vhosts").stdout.split()
        users = course.docker(*rabbitmqctl, "list_users").stdout.split()
        return {"vhost": dora.vhost in vhosts, "rabbitmq user": dora.rabbit_user in users,
                **{kind: course.docker(kind, "inspect", name).returncode == 0
                   for kind, name in (("container", dora.container), ("volume", dora.volume),
                                      ("network", course.network("dora")))}}

    kinds = ("vhost", "rabbitmq user", "container", "volume", "network")
    assert left() == dict.fromkeys(kinds, True)
    course.api("DELETE", "users/dora", expect_status=204)
    assert left() == dict.fromkeys(kinds, False)
