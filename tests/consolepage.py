"""The lab console's page in a real browser (Playwright): reading its terminal, and the seed's
unit 2 walked in the page alone. The local tests (test_console_browser.py) and the container
walk (test_stack.py) both use it."""

import base64
import re
import sys
import time

from playwright.sync_api import expect

from labkit import ROOT

sys.path.insert(0, str(ROOT / "scenarios"))
from units.table import UNITS  # noqa: E402

STARTING_HANDLER = (ROOT / "ticket-desk/handler.py").read_text()
UNIT2_HANDLER = (ROOT / "scenarios/unit2-ack-after-commit/solution/handler.py").read_text()


def screen(page):
    """The terminal's screen as text lines (its DOM rows), trailing blanks left out."""
    rows = page.locator("#terminal .xterm-rows > div").all_inner_texts()
    lines = [row.replace("\xa0", " ").rstrip() for row in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def wait_for_screen(page, wanted, timeout=30):
    """The screen once wanted(lines) holds (fails after timeout, showing the screen)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = screen(page)
        if wanted(lines):
            return lines
        assert time.monotonic() < deadline, f"the terminal did not get there in {timeout} s: {lines}"
        time.sleep(0.1)


def type_into_terminal(page, keys):
    page.locator("#terminal .xterm-helper-textarea").focus()
    page.keyboard.type(keys)


def clear_terminal(page):
    """An empty screen with the shell's prompt alone: the prompt, as the screen shows it.

    A screen seen once proves nothing: a page that has just attached draws the shell's recent
    output (up to 64 KiB) over several frames, and a new shell shows its prompt alone before a
    clear typed there has run. So the shell first prints a line no screen holds yet; only once
    that line is drawn is the clear typed, and only a screen without it is the cleared one."""
    marker = f"screen-marker-{time.monotonic_ns()}"
    type_into_terminal(page, f"echo {marker}\n")
    wait_for_screen(page, lambda lines: marker in lines)  # the echo's output, not the command line
    type_into_terminal(page, "clear\n")
    lines = wait_for_screen(page, lambda lines: len(lines) == 1 and lines[0].endswith(("$", "#")))
    return lines[0]


def run_command(page, prompt, command, timeout=60):
    """Type a command and wait for the prompt to come back."""
    def prompts(lines):
        return sum(line.startswith(prompt) for line in lines)

    before = prompts(screen(page))
    type_into_terminal(page, command + "\n")
    wait_for_screen(page, lambda lines: lines[-1:] == [prompt] and prompts(lines) > before, timeout)


def unanswered_links(page):
    """Every link the page offers (its in-page anchors aside), each fetched with the page's own
    cookies: {href: why} for those that do not answer with a page."""
    hrefs = page.eval_on_selector_all("a[href]", "links => links.map(link => link.href)")
    unanswered = {}
    for href in hrefs:
        if href.split("#")[0] == page.url.split("#")[0]:
            continue  # a skip link to a part of this page
        if href.split("?")[0].endswith("/logout"):
            continue  # the hub's Logout would end the login the other links are fetched with
        try:
            status = page.request.get(href, timeout=30_000).status
        except Exception as error:  # refused, unreachable: the learner would see an error page
            unanswered[href] = str(error).splitlines()[0]
            continue
        if status >= 400:
            unanswered[href] = status
    assert hrefs, "the page offers no link at all"
    return unanswered


def open_console(page, url, timeout=5):
    page.goto(url)
    console_ready(page, timeout)


def console_ready(page, timeout=5):
    """The page is the lab console (within `timeout` seconds), its terminal connected."""
    expect(page.get_by_role("heading", level=1)).to_have_text("Nightjar lab console", timeout=timeout * 1000)
    expect(page.locator("#terminal-status")).to_contain_text("Connected to the Workstation", timeout=30_000)


def register_on_nightjar(page, name):
    """Follow the console's link to Nightjar, register `name` there; the registration's ID."""
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="Nightjar (the site)").click()
    site = opened.value
    site.wait_for_load_state()
    expect(site.get_by_role("heading", level=1)).to_have_text("Nightjar Print Studio")
    site.get_by_role("main").get_by_role("link", name="Explore the evening", exact=True).click()
    site.get_by_role("main").get_by_role("link", name="Plan your visit", exact=True).click()
    site.get_by_role("main").get_by_role("link", name="The evening", exact=True).click()
    site.get_by_label("Guest name").fill(name)
    site.get_by_role("button", name="Register for the evening").click()
    expect(site).to_have_url(re.compile(r"/registrations/R-\d{4}$"))
    registration_id = site.url.rsplit("/", 1)[1]
    site.close()
    return registration_id


def verdict_rows(page):
    """[(check, PASS|FAIL)] as the page's Grade table shows them."""
    rows = page.locator("#grade-result table tr").all()[1:]
    return [(row.locator("th").inner_text(), row.locator("td").first.inner_text()) for row in rows]


def walk_unit_2(page, console_url):
    """The seed's unit 2 in the console's page alone: set up, handler.py replaced in the editor,
    Retry guest registered on Nightjar, Ctrl+C at Paused before-write., echo $? (130), the
    redelivery, Check, Grade. Returns (the terminal's screen, its prompt, the registration's ID,
    the grader's verdict as the console answered it)."""
    page.on("dialog", lambda dialog: dialog.accept())
    open_console(page, console_url)
    page.get_by_label("Unit", exact=True).select_option("2")
    expect(page.locator("#guide h3")).to_have_text("Unit 2 · Acknowledge only finished work")
    page.get_by_role("button", name="Set up unit 2").click()
    expect(page.locator("#setup-result p").first).to_have_text("Unit 2 is set up.", timeout=60_000)
    editor = page.get_by_role("textbox", name="handler.py")
    expect(editor).to_have_value(STARTING_HANDLER)

    editor.fill(UNIT2_HANDLER)
    page.get_by_role("button", name="Save handler.py").click()
    expect(page.locator("#save-result")).to_have_text("Saved handler.py in the Workstation.")

    registration_id = register_on_nightjar(page, "Retry guest")

    prompt = clear_terminal(page)
    type_into_terminal(page, "python3 worker.py --pause before-write\n")
    wait_for_screen(page, lambda lines: lines[-1:] == ["Paused before-write."])
    page.keyboard.press("Control+c")
    wait_for_screen(page, lambda lines: lines[-1:] == [prompt])
    run_command(page, prompt, "echo $?")
    run_command(page, prompt, "python3 worker.py")
    shown = screen(page)

    page.get_by_role("button", name="Check unit 2").click()
    expect(page.locator("#check-result .verdict")).to_have_text("Done", timeout=120_000)
    expect(page.locator("#check-result pre")).to_have_text(UNITS[2].done)

    with page.expect_response("**/api/grade", timeout=300_000) as answered:
        page.get_by_role("button", name="Grade handler.py").click()
    verdict = answered.value.json()
    assert "passed" in verdict, verdict  # else the console could not grade, and says why
    expect(page.locator("#grade-result caption")).to_have_text(
        "Every check passed." if verdict["passed"] else "Some checks failed.")
    return shown, prompt, registration_id, verdict


def expected_screen(prompt, registration_id):
    """The terminal after the walk, whole: the seed's lines, the shell's echo of Ctrl+C included."""
    return [f"{prompt} python3 worker.py --pause before-write",
            f"Received {registration_id} redelivered=False",
            "Paused before-write.",
            "^C",
            f"{prompt} echo $?",
            "130",
            f"{prompt} python3 worker.py",
            f"Received {registration_id} redelivered=True",
            "Handler returned.",
            prompt]


# In the page: the pixels of a PNG (a screenshot), decoded by the browser itself, and how many
# stand out from the box's own background (its most common shade) by more than a third.
COUNT_INK = """async (base64) => {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const image = await createImageBitmap(new Blob([bytes], { type: "image/png" }));
  const canvas = new OffscreenCanvas(image.width, image.height);
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const { data } = context.getImageData(0, 0, image.width, image.height);
  const shades = [];
  for (let i = 0; i < data.length; i += 4) shades.push(Math.round((data[i] + data[i + 1] + data[i + 2]) / 3));
  const counts = new Map();
  for (const shade of shades) counts.set(shade, (counts.get(shade) || 0) + 1);
  const background = [...counts.entries()].sort((a, b) => b[1] - a[1])[0][0];
  return shades.filter((shade) => Math.abs(shade - background) > 85).length;
}"""


def ink(page, box):
    """How many screen pixels inside `box` ({x, y, width, height}, CSS pixels) are drawn in ink:
    what the learner sees there, read from a screenshot, not from the DOM."""
    shot = page.screenshot(clip=box, animations="disabled", caret="hide")
    return page.evaluate(COUNT_INK, base64.b64encode(shot).decode())
