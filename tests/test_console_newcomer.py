"""The lab console as a newcomer meets it, in Chromium: every character drawn (read from the
screen's pixels), the guide as the console shows it, its boxes fitting or scrolling, a Grade
result that belongs to one handler.py, and the way out for a stuck learner. One console for
the module: its tests share its Workstation, each bringing it to the state it needs."""

import asyncio
import html
import re
import time

import pytest
from playwright.sync_api import expect

from browserkit import AXE, axe_results, needs_chromium
from consolekit import TOKEN, Console, TerminalClient
from consolepage import clear_terminal, ink, open_console, run_command, wait_for_screen
from labkit import ROOT, Lab

pytestmark = needs_chromium
ZOOMS = (1, 1.25, 1.5)


@pytest.fixture(scope="module")
def console(tmp_path_factory, grading_broker):
    lab = Lab(tmp_path_factory.mktemp("lab"))
    console = Console(lab, tmp_path_factory.mktemp("console"), grading_broker=grading_broker)
    yield console
    console.stop()
    lab.cleanup()


@pytest.mark.parametrize("zoom", ZOOMS)
def test_every_underscore_is_drawn(console, browser, zoom):
    """At 100 %, 125 % and 150 % (the screen's pixels per CSS pixel, as the browser's zoom sets
    them): a terminal row of underscores alone, an editor line of them, and the underscore of
    a guide's code block each leave ink on the screen."""
    context = browser.new_context(device_scale_factor=zoom, viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        open_console(page, f"{console.url}?token={TOKEN}")
        prompt = clear_terminal(page)
        run_command(page, prompt, "printf '%s\\n' ________________")
        row = page.locator("#terminal .xterm-rows > div", has_text="________________").last
        assert row.inner_text().strip() == "________________"
        assert ink(page, row.bounding_box()) > 0, f"the terminal's underscores are not drawn at {zoom}"

        editor = page.locator("#editor")
        editor.fill("________________\n")
        box = editor.bounding_box()
        line = page.evaluate("""() => {
            const style = getComputedStyle(document.getElementById('editor'));
            return { top: parseFloat(style.paddingTop) + parseFloat(style.borderTopWidth),
                     left: parseFloat(style.paddingLeft) + parseFloat(style.borderLeftWidth),
                     height: parseFloat(style.lineHeight) };
        }""")
        first_line = {"x": box["x"] + line["left"], "y": box["y"] + line["top"], "width": 100,
                      "height": line["height"]}
        assert ink(page, first_line) > 0, f"the editor's underscores are not drawn at {zoom}"

        page.get_by_label("Unit", exact=True).select_option("2")
        expect(page.locator("#guide h3")).to_have_text("Unit 2 · Acknowledge only finished work")
        underscore = page.evaluate("""() => {
            for (const code of document.querySelectorAll('#guide pre code')) {
                const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
                for (let node = walker.nextNode(); node; node = walker.nextNode()) {
                    const at = node.data.indexOf('_');
                    if (at < 0) continue;
                    node.parentElement.scrollIntoView({ block: 'center' });
                    const range = document.createRange();
                    range.setStart(node, at);
                    range.setEnd(node, at + 1);
                    const pre = code.parentElement;  // a wide block scrolls: bring the character in
                    pre.scrollLeft += range.getBoundingClientRect().x - pre.getBoundingClientRect().x - 20;
                    // The line's own box: the glyph's box and the half-leading above and below it.
                    const r = range.getBoundingClientRect();
                    const leading = (parseFloat(getComputedStyle(pre).lineHeight) - r.height) / 2;
                    return { x: r.x, y: r.y - leading, width: r.width, height: r.height + 2 * leading };
                }
            }
            return null;
        }""")
        assert underscore is not None, "no underscore in unit 2's code blocks"
        assert ink(page, underscore) > 0, f"the guide's underscore is not drawn at {zoom}"
    finally:
        context.close()


def test_japanese_is_drawn_in_its_own_glyphs(console, page):
    """The language switch ("日本語で読む") and the Japanese guide's heading are drawn in
    Japanese glyphs. A browser without a Japanese font draws each of those characters as the
    same empty box as a character no font has (here a private-use one, in the same element)."""
    open_console(page, f"{console.url}?token={TOKEN}")
    button = page.locator("#language")
    expect(button).to_have_text("日本語で読む")
    assert drawn_in_glyphs(button), "the language switch's Japanese is drawn as empty boxes"
    button.click()
    heading = page.locator("#guide h3")
    expect(heading).to_have_text(re.compile("[\u3040-\u30ff\u4e00-\u9fff]"))
    assert drawn_in_glyphs(heading), f"the Japanese guide's heading {heading.inner_text()!r} is drawn as empty boxes"
    button.click()  # back to English


def drawn_in_glyphs(element):
    """Whether the element looks different with each of its letters put as a character no
    font draws: a letter the browser has no glyph for is drawn as that same box."""
    as_text = element.screenshot(animations="disabled", caret="hide")
    text = element.evaluate("""(node) => {
        const text = node.textContent;
        node.textContent = text.replace(/\\S/g, '\\ue000');
        return text;
    }""")
    as_boxes = element.screenshot(animations="disabled", caret="hide")
    element.evaluate("(node, text) => { node.textContent = text; }", text)
    return as_text != as_boxes


def test_a_grade_belongs_to_the_handler_it_judged(console, page):
    """The verdict names its time; once handler.py changes (here in the terminal) it says it is
    for an earlier handler.py, graded at that time; a new Grade clears that."""
    open_console(page, f"{console.url}?token={TOKEN}")
    expect(page.locator("#editor")).not_to_have_value("")
    grade = page.get_by_role("button", name="Grade handler.py")
    with page.expect_response("**/api/grade", timeout=300_000):
        grade.click()
    expect(page.locator("#grade-result table")).to_have_count(1)
    graded_at = page.locator("#graded-at").inner_text()
    assert graded_at.startswith("Graded at ")
    expect(page.locator("#grade-old")).to_have_count(0)

    prompt = clear_terminal(page)
    run_command(page, prompt, "echo '# changed in the terminal' >> handler.py")
    expect(page.locator("#grade-old")).to_have_text(
        f"This result is for an earlier handler.py, graded at {graded_at.removeprefix('Graded at ').rstrip('.')};"
        " the file has changed since. Grade again for the current one.", timeout=10_000)
    expect(page.locator("#grade-result table")).to_have_count(1)  # still there to read, marked

    with page.expect_response("**/api/grade", timeout=300_000):
        grade.click()
    expect(page.locator("#grade-result table")).to_have_count(1)
    expect(page.locator("#grade-old")).to_have_count(0)
    graded_at = page.locator("#graded-at").inner_text().removeprefix("Graded at ").rstrip(".")

    # Saved from the editor: the same, at once.
    editor = page.locator("#editor")
    editor.fill(editor.input_value() + "# changed in the editor\n")
    page.get_by_role("button", name="Save handler.py").click()
    expect(page.locator("#grade-old")).to_contain_text(f"for an earlier handler.py, graded at {graded_at};")


def shell_blocks(console, unit, lang):
    """The shell blocks the console's guide shows for a unit, in order, as their Copy gives them."""
    status, guide = console.request("GET", f"/api/units/{unit}/guide?lang={lang}")
    assert status == 200, guide
    return [html.unescape(block) for block in
            re.findall(r'<pre><code class="language-sh">(.*?)</code></pre>', guide["html"], re.S)]


PROMPT = "[shell] "
PAUSED = re.compile(r"\nPaused [a-z-]+\.\s*$")  # a worker waiting at a pause point


def settle(terminal, timeout=120):
    """What the shell shows until it waits: at its prompt, or a worker at a pause, and then
    nothing more for a moment (a block's next line may follow the prompt)."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = terminal.shown.endswith(PROMPT) or PAUSED.search(terminal.shown)
        try:
            message = terminal.receive(timeout=0.4 if waiting else max(deadline - time.monotonic(), 0.1))
        except asyncio.TimeoutError:
            assert waiting, f"the shell did not come back within {timeout} s: {terminal.shown[-2000:]!r}"
            break
        assert message is not None, f"the terminal closed: {terminal.shown[-2000:]!r}"
        if message[0] == "stdout":
            terminal.shown += message[1]
    shown, terminal.shown = terminal.shown, ""
    return shown


@pytest.mark.parametrize("lang", ["en", "ja"])
def test_every_shell_block_the_console_shows_runs_in_its_terminal(console, lang):
    """Units 1 to 3, each set up by the console, then each shell block of its guide pasted into
    the console's terminal in order (Ctrl+C where a worker waits at a pause): nothing missing."""
    terminal = TerminalClient(console)
    try:
        assert terminal.receive()[0] == "attached"
        terminal.type(f"PS1='{PROMPT}'\n")
        settle(terminal)
        transcript = ""
        for unit in ("1", "2", "3"):
            status, done = console.request("POST", f"/api/units/{unit}/setup", {"lang": lang})
            assert (status, done["status"]) == (200, 0), done
            blocks = shell_blocks(console, unit, lang)
            assert blocks, f"unit {unit} shows no shell block"
            for block in blocks:
                terminal.type(block)
                shown = settle(terminal)
                if PAUSED.search(shown):  # the guide's Ctrl+C
                    terminal.type("\x03")
                    shown += settle(terminal)
                assert shown.endswith(PROMPT), shown
                transcript += shown
        for wrong in ("No such file or directory", "command not found", "Traceback"):
            assert wrong not in transcript, transcript
        assert "Received R-0002 redelivered=False" in transcript, transcript  # the blocks ran workers
    finally:
        terminal.close()


# Every table and code block of the guide: inside the pane, and either all of it in sight or
# scrolling in its own box, marked so (its right edge shaded, overflow-x: scroll).
BOXES = """() => {
  for (const details of document.querySelectorAll('#guide details')) details.open = true;
  const pane = document.getElementById('guide').getBoundingClientRect();
  return [...document.querySelectorAll('#guide pre, #guide .table-box')].map((box) => ({
    text: box.textContent.slice(0, 60),
    inside: box.getBoundingClientRect().right <= pane.right + 1,
    fits: box.scrollWidth <= box.clientWidth + 1,
    scrolls: box.classList.contains('wide') && getComputedStyle(box).overflowX === 'scroll'
             && getComputedStyle(box).boxShadow !== 'none',
    tables: box.querySelectorAll('table').length,
  }));
}"""


@pytest.mark.parametrize("width", [1280, 1920])
def test_every_table_and_code_block_fits_or_scrolls_visibly(console, browser, width):
    context = browser.new_context(viewport={"width": width, "height": 1000})
    page = context.new_page()
    try:
        open_console(page, f"{console.url}?token={TOKEN}")
        picker = page.get_by_label("Unit", exact=True)
        expect(page.locator("#guide h3")).to_have_count(1)

        def measured(key):
            page.evaluate(BOXES)  # opens the folded tables; markWide measures them again
            page.wait_for_timeout(100)
            boxes = page.evaluate(BOXES)
            assert any(box["tables"] for box in boxes) or not key.isdigit()
            for box in boxes:
                assert box["inside"] and (box["fits"] or box["scrolls"]), (key, page.locator("#guide").get_attribute("lang"), box)

        for key in picker.locator("option").evaluate_all("options => options.map(o => o.value)"):
            if key != picker.input_value():
                with page.expect_response(f"**/api/units/{key}/guide*"):
                    picker.select_option(key)
            measured(key)
            with page.expect_response(f"**/api/units/{key}/guide*"):
                page.locator("#language").click()  # the other language
            measured(key)
    finally:
        context.close()


def test_a_stuck_learner_sees_the_solution_and_can_solve_the_unit(console, browser):
    """Show the solution: the unit's solution handler.py beside the learner's, the lines that
    differ marked. Solve unit 2: a confirm saying what it replaces, the unit's ./solve, the
    learner's handler.py kept in .backups."""
    status, done = console.request("POST", "/api/units/2/setup", {"lang": "en"})
    assert (status, done["status"]) == (200, 0), done
    handler = console.lab.workstation / "handler.py"
    mine = "# my attempt\n" + handler.read_text()
    handler.write_text(mine)
    solution = (ROOT / "scenarios/unit2-ack-after-commit/solution/handler.py").read_text()
    context = browser.new_context(bypass_csp=True)  # axe-core is added to the page as a script
    page = context.new_page()
    open_console(page, f"{console.url}?token={TOKEN}")
    page.get_by_label("Unit", exact=True).select_option("2")
    expect(page.locator("#editor")).to_have_value(mine)

    page.get_by_role("button", name="Show the solution").click()
    rows = page.locator("#solution-result table.solution tr")
    expect(rows.first).to_be_visible()
    shown = rows.evaluate_all("""rows => rows.slice(1).map(row => ({
        kind: row.className, mark: row.cells[0].textContent,
        mine: row.cells[1].textContent, theirs: row.cells[2].textContent}))""")
    assert [row["mine"] for row in shown if row["kind"] != "diff-added"] == mine.splitlines()
    assert [row["theirs"] for row in shown if row["kind"] != "diff-removed"] == solution.splitlines()
    for row in shown:
        assert (row["kind"] == "diff-same") == (row["mine"] == row["theirs"]), row
        assert (row["mark"] == "") == (row["kind"] == "diff-same"), row
    assert any(row["kind"] != "diff-same" for row in shown)
    if AXE.exists():
        assert axe_results(page)["violations"] == []

    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Solve unit 2").click()
    expect(page.locator("#solution-result p").first).to_have_text("Unit 2 is solved: check it.", timeout=180_000)
    assert "./solve" in asked[0] and "replaces yours" in asked[0] and ".backups" in asked[0], asked
    expect(page.locator("#editor")).to_have_value(solution)
    backups = console.lab.workstation / ".backups"
    assert mine in [kept.read_text() for kept in backups.iterdir() if kept.is_file()]

    # Unit 1 changes nothing in handler.py; a lesson has no way out here, its guide walks it.
    page.get_by_label("Unit", exact=True).select_option("1")
    page.get_by_role("button", name="Show the solution").click()
    expect(page.locator("#solution-result")).to_have_text(
        "Unit 1 asks for no change to handler.py: its steps are in Nightjar and the terminal."
        " Solve unit 1 does them.")
    page.get_by_label("Unit", exact=True).select_option("cl-13-2")
    expect(page.get_by_role("button", name="Show the solution")).to_be_hidden()
    expect(page.locator("#solve")).to_be_hidden()
    context.close()


def test_a_graded_course_turns_the_way_out_off(console, page, tmp_path):
    graded = Console(console.lab, tmp_path, agent=False, extra_env={"NIGHTJAR_CONSOLE_SOLUTIONS": "off"})
    try:
        page.goto(f"{graded.url}?token={TOKEN}")
        expect(page.get_by_role("button", name="Check unit 1")).to_be_visible()
        expect(page.get_by_role("button", name="Show the solution")).to_have_count(0)
        expect(page.get_by_role("button", name="Solve unit 1")).to_have_count(0)
        refused = {"error": "this course turns the solutions off (NIGHTJAR_CONSOLE_SOLUTIONS=off)"}
        assert graded.request("GET", "/api/units/2/solution") == (403, refused)
        assert graded.request("POST", "/api/units/2/solve", {}) == (403, refused)
    finally:
        graded.stop()
