"""The lab console's page in a real browser (Chromium), on local processes: the seed's unit 2
walked in the page alone, every link it offers answering, a second tab and a reload on the same
shell, axe-core, and the unit done with the keyboard alone. (test_stack.py walks the same in containers.)"""

import pytest
from playwright.sync_api import expect

from browserkit import axe_results, document_screenshot, needs_axe, needs_chromium
from consolekit import TOKEN, Console
from consolepage import (UNIT2_HANDLER, clear_terminal, expected_screen, open_console, run_command,
                         screen, unanswered_links, verdict_rows, wait_for_screen, walk_unit_2)
from sitekit import Site

pytestmark = needs_chromium


@pytest.fixture
def lab_console(lab, tmp_path, grading_broker):
    """The console with its agent, the site, and the grading service on the session's grading broker."""
    site = Site(lab)
    # The test lab's management API answers nowhere: as make local then does, no link to it.
    console = Console(lab, tmp_path, grading_broker=grading_broker,
                      extra_env={"NIGHTJAR_SITE_PORT": str(site.port), "NIGHTJAR_MANAGEMENT_PORT": "none"})
    console.site = site
    yield console
    console.stop()
    site.stop()


def test_unit_2_in_the_browser_alone(lab_console, page):
    shown, prompt, registration_id, verdict = walk_unit_2(page, f"{lab_console.url}?token={TOKEN}")
    assert shown == expected_screen(prompt, registration_id)
    # The page shows the grader's verdicts, each as it came; this handler acks after the
    # commit but is not yet idempotent: a redelivery after the commit writes a second ticket.
    assert verdict_rows(page) == [(check["name"], "PASS" if check["passed"] else "FAIL")
                                  for check in verdict["checks"]]
    check_4 = next(check for check in verdict["checks"] if check["name"].startswith("4. "))
    assert not check_4["passed"], check_4
    # Under its reason and hint, the failed check's story, line for line as the grader tells it.
    row = page.locator("#grade-result tr", has_text=check_4["name"])
    assert row.locator("pre").inner_text() == "\n".join(check_4["story"])
    assert check_4["story"][-1].startswith("found  R-")
    document_screenshot(page, "console-unit-2-graded")  # the documentation's picture of the console
    # Unit 2 passed its check: the picker says so, after a reload too.
    page.reload()
    expect(page.get_by_label("Unit", exact=True).locator("option[value='2']")).to_have_text(
        "Unit 2 · Acknowledge only finished work (passed)")


def test_every_link_the_page_offers_answers(lab_console, page):
    open_console(page, f"{lab_console.url}?token={TOKEN}")
    expect(page.locator("#site-link")).to_have_attribute("href", f"http://127.0.0.1:{lab_console.site.port}/")
    expect(page.locator("#management-link")).to_have_count(0)
    assert unanswered_links(page) == {}


def test_a_second_tab_and_a_reload_share_the_shell(lab_console, context):
    first = context.new_page()
    open_console(first, f"{lab_console.url}?token={TOKEN}")
    prompt = clear_terminal(first)
    run_command(first, prompt, "export MARK=kept")
    second = context.new_page()  # the cookie is the context's: no token in this address
    open_console(second, lab_console.url)
    expect(second.locator("#terminal-status")).to_have_text(
        "Connected to the Workstation: the same shell as before.")
    run_command(second, prompt, "echo $MARK")
    wait_for_screen(first, lambda lines: lines[-3:] == [f"{prompt} echo $MARK", "kept", prompt])
    first.reload()
    expect(first.locator("#terminal-status")).to_have_text(
        "Connected to the Workstation: the same shell as before.", timeout=30_000)
    wait_for_screen(first, lambda lines: lines[-3:] == [f"{prompt} echo $MARK", "kept", prompt])


@needs_axe
def test_the_console_page_passes_axe(lab_console, browser):
    context = browser.new_context(bypass_csp=True)  # axe-core is added to the page as a script
    page = context.new_page()
    open_console(page, f"{lab_console.url}?token={TOKEN}")
    page.get_by_role("button", name="Check unit 1").click()
    expect(page.locator("#check-result .verdict")).to_have_text("Not done yet", timeout=60_000)
    page.locator("#editor").fill("def handle(:\n")
    page.get_by_role("button", name="Save handler.py").click()
    expect(page.locator("#save-result .problem")).to_contain_text("line 1")
    results = axe_results(page)
    assert [(v["id"], [n["target"] for n in v["nodes"]]) for v in results["violations"]] == []
    checked = {rule["id"] for rule in results["passes"]}
    assert {"color-contrast", "label", "button-name", "region", "landmark-one-main"} - checked == set(), sorted(checked)
    page.get_by_role("button", name="日本語で読む").click()
    expect(page.locator("#guide h3")).to_have_text("単元1 · 登録から入場券までを追う")
    assert axe_results(page)["violations"] == []
    context.close()


def test_the_unit_can_be_done_with_the_keyboard_alone(lab_console, page):
    page.on("dialog", lambda dialog: dialog.accept())
    open_console(page, f"{lab_console.url}?token={TOKEN}")

    def focused():
        return page.evaluate("document.activeElement.id || document.activeElement.className"
                             " || document.activeElement.textContent")

    def tab_to(target, limit=80):
        for _ in range(limit):
            page.keyboard.press("Tab")
            if focused() == target:
                return
        raise AssertionError(f"Tab never reached {target}")

    # Every control in turn, from the top: the links, the picker, Set up, Check, the language,
    # the guide's copy buttons, then the terminal, the editor, Save and Grade.
    tab_to("unit")
    page.keyboard.press("ArrowDown")  # unit 2
    expect(page.locator("#setup")).to_have_text("Set up unit 2")
    tab_to("setup")
    page.keyboard.press("Enter")
    expect(page.locator("#setup-result p").first).to_have_text("Unit 2 is set up.", timeout=60_000)
    tab_to("check")
    tab_to("copy")
    tab_to("xterm-helper-textarea")
    prompt = clear_terminal(page)
    page.keyboard.type("echo typed\n")
    wait_for_screen(page, lambda lines: lines[-2:] == ["typed", prompt])
    page.keyboard.press("Tab")  # Tab stays in the shell (completion)...
    assert focused() == "xterm-helper-textarea"
    page.keyboard.press("Escape")  # ...Esc, then Tab, moves on
    page.keyboard.press("Tab")
    tab_to("editor", limit=3)
    page.keyboard.press("Control+a")
    for line in UNIT2_HANDLER.splitlines(keepends=True):  # Tab indents by four spaces
        code = line.lstrip(" ")
        indent = len(line) - len(code)
        for _ in range(indent // 4):
            page.keyboard.press("Tab")
        page.keyboard.type(" " * (indent % 4) + code)
    assert page.locator("#editor").input_value() == UNIT2_HANDLER
    page.keyboard.press("Control+s")
    expect(page.locator("#save-result")).to_have_text("Saved handler.py in the Workstation.")
    page.keyboard.press("Escape")
    tab_to("save", limit=3)
    tab_to("grade")
    with page.expect_response("**/api/grade", timeout=300_000):
        page.keyboard.press("Enter")
    expect(page.locator("#grade-result table")).to_have_count(1)
    assert screen(page)[-2:] == ["typed", prompt]
