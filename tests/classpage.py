"""The instructor's live class page on test_course.py's course (its fixtures, its learners): the
signals on the right learners, one learner close up and its record in their console, a word
to the class, projection mode, a learner's token refused. Imported by test_course.py at the
place they run, after unit 2's walk; not a test module of its own (one course for both)."""

import json
import re
import secrets
import time
import urllib.request

from playwright.sync_api import expect

from browserkit import document_screenshot
from consolepage import clear_terminal, run_command
from coursekit import in_lab, in_url, landed_in_lab, log_in_page, run_course

IDLE_SIGNAL_SECONDS = 15  # the class page's idle signal: idle 15 s, on a unit 30 s at least
RAISING_HANDLER = "def handle(ch, delivery, job, db, pause):\n    raise RuntimeError('broken on purpose')\n"
zoe = "zoë.lee@example.org"  # test_course.py's Zoë, as the hub names her


def instructors_page(course, browser):
    """The instructor's class page in a browser of their own, its stream connected."""
    page = log_in_page(browser.new_context(), course, "instructor",
                       (course.folder / "var" / "instructor-password").read_text().strip())
    expect(page.locator("#connection")).to_have_text("Live: changes show as they happen.")
    return page


def signals_on(page, name):
    """The kinds of the signals the class page shows on this learner's row."""
    row = page.locator("#rows tr", has=page.locator("th", has_text=name))
    return row.locator(".signal").evaluate_all("found => found.map(s => s.dataset.kind)")


def keep_working(pages, *names):
    """These learners do something in their terminals: their labs are not idle (the course's
    culler stops a lab idle for 2 minutes here, and the tests after these need theirs)."""
    for name in names:
        run_command(pages[name], clear_terminal(pages[name]), "true")


def set_up(page, unit):
    """The learner sets the unit up with the console's own button."""
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_label("Unit", exact=True).select_option(unit)
    page.get_by_role("button", name=f"Set up unit {unit}").click()
    expect(page.locator("#setup-result p").first).to_have_text(f"Unit {unit} is set up.", timeout=60_000)


def worker_runs(course, name, times, *setup):
    """Shell lines in the learner's lab, then worker.py `times` times; the registration's ID."""
    done = in_lab(course, name, "bash", "-c", "; ".join(setup) + "; python3 desk.py register 'Signal guest'")
    assert done.returncode == 0, done.stdout + done.stderr
    registration = done.stdout.split()[1]
    for _ in range(times):
        in_lab(course, name, "python3", "worker.py")
    return registration


def test_the_class_page_shows_each_signal_on_its_learner_within_3_s(course, learners, pages, browser):
    """Ada's and Eve's handlers raise on every delivery, Bob's writes a duplicate ticket, Gil sets
    a unit up and goes idle, Fay and Zoë are fine. The page shows it as it happens, and a restart
    of the service loses none of it."""
    keep_working(pages, "ada", "bob.smith")
    instructor = instructors_page(course, browser)
    # Gus signs up; the page shows him waiting, with the way to authorize him.
    run_course.sign_up(course.env, "gus", secrets.token_urlsafe(12))
    expect(instructor.locator("#waiting-list")).to_have_text("gus", timeout=15_000)
    expect(instructor.locator("#authorize-link")).to_have_attribute("href", "/hub/authorize")
    others = {name: course.learner(name) for name in ("eve", "fay", "gil")}
    for name in others:
        course.start_lab(name)
    # Gil sets unit 1 up in his console, and does nothing more.
    gil = log_in_page(browser.new_context(), course, "gil", others["gil"].password)
    landed_in_lab(gil, course, "gil")
    set_up(gil, "1")
    gil_since = time.monotonic()
    eve = log_in_page(browser.new_context(), course, "eve", others["eve"].password)
    landed_in_lab(eve, course, "eve")
    set_up(eve, "2")
    in_lab(course, "eve", "python3", "-c", f"open('handler.py', 'w').write({RAISING_HANDLER!r})")
    worker_runs(course, "eve", 3, "true")
    worker_runs(course, "fay", 1, "true")
    keep_working(pages, "ada", "bob.smith")
    twice = worker_runs(course, "bob.smith", 1, "true")
    in_lab(course, "bob.smith", "bash", "-c", f"python3 desk.py retry {twice} && python3 worker.py")
    expect(instructor.locator("#rows tr", has_text="bob.smith").locator(".signal")).to_have_text(
        re.compile(rf"^{twice} has 2 tickets: \d+, \d+ since "), timeout=3_000)
    in_lab(course, "ada", "python3", "-c", f"open('handler.py', 'w').write({RAISING_HANDLER!r})")
    crashed = worker_runs(course, "ada", 3, "true")
    # Ada's third crash: on her row within 3 s, naming the registration and linking to it.
    signal = instructor.locator("#rows tr", has_text="ada").locator(".signal")
    expect(signal).to_have_text(re.compile(rf"^handler.py raised on {crashed} 3 times in a row, in \d+ s since "),
                                timeout=3_000)
    expect(signal.locator("a")).to_have_attribute("href", f"learners/ada#{crashed}")
    expect(instructor.locator("#shared")).to_have_text("2 learners: a handler raising on every delivery in unit 2")
    # Gil: idle, long on unit 1 (the class has no median for it yet: twice the idle limit).
    left = 2 * IDLE_SIGNAL_SECONDS - (time.monotonic() - gil_since)
    expect(instructor.locator("#rows tr", has_text="gil").locator(".signal")).to_have_text(
        re.compile(r"^\d+ s on unit 1, idle for \d+ s since "), timeout=int((max(left, 0) + 15) * 1000))
    shown = {name: signals_on(instructor, name) for name in ("ada", "eve", "bob.smith", "gil", "fay", zoe)}
    # Eve, who did nothing more since her crashes, may be idle by now too (the thresholds are short here).
    shown["eve"] = [kind for kind in shown["eve"] if kind != "stuck-idle"]
    assert shown == {"ada": ["handler-raises"], "eve": ["handler-raises"], "bob.smith": ["duplicate-ticket"],
                     "gil": ["stuck-idle"], "fay": [], zoe: []}, shown
    # Needs help first: those with signals above Fay and Zoë, who are fine.
    names = instructor.locator("#rows th").all_inner_texts()
    assert set(names[:4]) == {"ada", "eve", "bob.smith", "gil"} and {"fay", zoe} <= set(names[4:]), names
    keep_working(pages, "ada", "bob.smith")
    assert instructor.evaluate("document.documentElement.scrollWidth <= 1280")
    # The service restarts: the page connects again by itself and shows the same, from its database.
    before = instructor.request.get(f"{course.url}/services/nightjar/api/class").json()
    connections = int(instructor.evaluate("document.body.dataset.connections"))
    assert course.docker("restart", f"{course.project}-service", timeout=120).returncode == 0
    instructor.wait_for_function(f"Number(document.body.dataset.connections) > {connections}", timeout=60_000)
    expect(instructor.locator("#connection")).to_have_text("Live: changes show as they happen.")
    after = instructor.request.get(f"{course.url}/services/nightjar/api/class").json()
    # The same learners, units and signals; an idle signal may have come meanwhile (short thresholds).
    assert class_outline(after) == class_outline(before)
    instructor.context.close()
    eve.context.close()
    gil.context.close()


def test_the_instructor_looks_close_at_one_learner_who_sees_it_and_a_word_reaches_the_class(
        course, learners, pages, browser):
    keep_working(pages, "ada", "bob.smith")
    instructor = instructors_page(course, browser)
    instructor.locator("#rows tr", has_text="ada").locator(".signal a").click()
    crashed = instructor.url.rsplit("#", 1)[1]
    expect(instructor.get_by_role("heading", level=1)).to_have_text("ada")
    expect(instructor.locator("#handler")).to_have_text(RAISING_HANDLER)
    # Its difference from the unit's starting file (unit 2 starts with the lab's own handler.py).
    assert instructor.locator("#diff-start").inner_text().startswith("--- unit 2's handler.py\n+++ handler.py now\n")
    timeline = instructor.get_by_role("region", name=crashed)
    story = timeline.locator("pre").inner_text().splitlines()
    assert len(story) >= 3 and all("redelivered=" in line for line in story), story
    # The same picture as on Ada's registration page: a column a delivery, each raising.
    picture = timeline.get_by_role("img", name=f"Delivery history of {crashed}")
    expect(picture.locator(".delivery")).to_have_text([f"Delivery {n}" for n in range(1, len(story) + 1)])
    expect(picture.locator(".step.raised")).to_have_count(len(story))
    document_screenshot(instructor, "course-learner-close-up")
    # Ada's console says so, within 3 s.
    expect(pages["ada"].locator(".course-viewed")).to_have_text(
        re.compile(r"^Viewed by instructor at \d\d:\d\d"), timeout=3_000)
    # A word to the learners who share a signal: Ada's page has it within 3 s, in her language.
    instructor.go_back()
    expect(instructor.locator("#connection")).to_have_text("Live: changes show as they happen.")
    instructor.get_by_label("A word to").select_option(label="2 learners: a handler raising on every delivery in unit 2")
    instructor.get_by_label("message", exact=True).fill("Look at the traceback of your worker.")
    instructor.get_by_role("button", name="Send").click()
    expect(instructor.locator("#message-result")).to_have_text("Sent to 2 learners.")
    message = pages["ada"].locator(".course-message")
    expect(message).to_have_text("Message from instructor: Look at the traceback of your worker. Dismiss",
                                 timeout=3_000)
    message.get_by_role("button", name="Dismiss").click()
    expect(message).to_have_count(0)
    pages["ada"].reload()
    expect(pages["ada"].locator(".course-viewed")).to_be_visible(timeout=10_000)
    expect(message).to_have_count(0)  # dismissed, it stays so
    # Projection mode: the same class, no name on it.
    projection = instructor.context.new_page()
    projection.goto(f"{course.url}/services/nightjar/?projection=1")
    expect(projection.locator("#connection")).to_have_text("Live: changes show as they happen.")
    names = projection.locator("#rows th").all_inner_texts()
    assert all(re.fullmatch(r"Learner \d+", name) for name in names) and len(names) == len(set(names)), names
    assert "bob.smith" not in projection.locator("body").inner_text()
    instructor.context.close()
    keep_working(pages, "ada", "bob.smith")


def test_a_learners_token_opens_nothing_of_the_staffs_and_forges_no_event(course, learners):
    """Ada's lab's own token (what her console holds): 403 on every staff page and API; her
    events are hers whatever the body says, and a huge body is refused whole; the events'
    websocket opens for her console's token alone, never for a page (any Origin)."""
    before_view = course_class(course)
    before = {row["name"]: row for row in before_view["learners"]}
    asked = in_lab(course, "ada", "python3", "-c", """
import json, os, time, urllib.request, urllib.error
base = os.environ["NIGHTJAR_CONSOLE_GRADER"]
def ask(path, method="GET", body=None):
    request = urllib.request.Request(base + path, method=method, data=body,
                                     headers={"Authorization": "token " + os.environ["JUPYTERHUB_API_TOKEN"]})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
for path in ("", "live", "api/class", "report.html", "report.csv", "learners/bob.smith", "api/learners/bob.smith"):
    print(path or "/", ask(path))
print("grade-all", ask("grade-all", "POST", b""))
print("messages", ask("api/messages", "POST", json.dumps({"to": "all", "text": "hi"}).encode()))
forged = {"learner": "bob.smith", "name": "bob.smith",
          "events": [{"kind": "check", "unit": "2", "passed": False, "missing": "missing: forged",
                      "time": time.time(), "learner": "bob.smith"}]}
print("forged", ask("events", "POST", json.dumps(forged).encode()))
huge = {"events": [{"kind": "setup", "unit": "3", "time": time.time(), "pad": "x" * 100_000}]}
print("huge", ask("events", "POST", json.dumps(huge).encode()))
def opens(token=os.environ["JUPYTERHUB_API_TOKEN"], origin=None):
    # The websocket's opening handshake, as the console's own (its status line's code).
    import base64, socket, urllib.parse
    url = urllib.parse.urlsplit(base + "events/socket")
    with socket.create_connection((url.hostname, url.port), timeout=30) as connection:
        connection.sendall((f"GET {url.path} HTTP/1.1\\r\\nHost: {url.netloc}\\r\\nUpgrade: websocket\\r\\n"
                            "Connection: Upgrade\\r\\nSec-WebSocket-Version: 13\\r\\n"
                            f"Sec-WebSocket-Key: {base64.b64encode(os.urandom(16)).decode()}\\r\\n"
                            + (f"Authorization: token {token}\\r\\n" if token else "")
                            + (f"Origin: {origin}\\r\\n" if origin else "") + "\\r\\n").encode())
        return connection.recv(100).split()[1].decode()
print("socket", opens())
print("socket from a page", opens(origin="http://127.0.0.1:8000"))
print("socket without a token", opens(token=None))
print("socket with a wrong token", opens(token="0" * 32))
""")
    assert asked.stdout.splitlines() == [
        "/ 403", "live 403", "api/class 403", "report.html 403", "report.csv 403",
        "learners/bob.smith 403", "api/learners/bob.smith 403", "grade-all 403", "messages 403",
        "forged 200", "huge 413", "socket 101", "socket from a page 403",
        "socket without a token 403", "socket with a wrong token 403"], asked.stdout + asked.stderr
    after_view = course_class(course)
    after = {row["name"]: row for row in after_view["learners"]}
    # Bob's row is as it was (his lab's state and last activity are the hub's: its culler may
    # stop his lab meanwhile); the forged Check is Ada's; the huge setup changed no unit.
    assert class_outline(after_view)["bob.smith"] == class_outline(before_view)["bob.smith"]
    assert after["bob.smith"]["last_check"] == before["bob.smith"]["last_check"]
    assert after["ada"]["last_check"]["missing"] == "missing: forged", after["ada"]
    assert after["ada"]["unit"] == before["ada"]["unit"] == "2", (before["ada"], after["ada"])


def class_outline(view):
    """Each learner of api/class with their unit and the kinds of their signals, idle aside (by
    name: an idle signal that came meanwhile moves its learner up the list)."""
    return {row["name"]: (row["unit"], [s["kind"] for s in row["signals"] if s["kind"] != "stuck-idle"])
            for row in view["learners"]}


def course_class(course):
    """GET api/class with the instructor's own token."""
    return staff_api(course, "api/class")


def staff_api(course, path):
    """The course's service's staff API with the instructor's own token, made for it on the hub."""
    token = course.api("POST", "users/instructor/tokens", {"note": "the class's API"}, expect_status=201)["token"]
    request = urllib.request.Request(f"{course.url}/services/nightjar/{path}",
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def delivered(course, name, registration, timeout=30):
    """The registration's deliveries in the learner's close up, once the service has them."""
    deadline = time.monotonic() + timeout
    while True:
        found = {r["registration"]: r for r in staff_api(course, f"api/learners/{in_url(name)}")["registrations"]}
        if registration in found or time.monotonic() > deadline:
            return found.get(registration)
        time.sleep(1)
