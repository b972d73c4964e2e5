"""The lab console as local processes (its agent and its server) on a throwaway lab: the token,
the Origin rule, every endpoint's answers to good and bad input, the editor, and the terminal's
shell on a real PTY, driven over the websocket as the page drives it."""

import http.client
import os
import re
import stat
import subprocess
import sys

import pytest
from tornado.httpclient import HTTPClientError

from consolekit import TOKEN, Console, TerminalClient, unix_request
from labkit import HANDLERS, ROOT

sys.path.insert(0, str(ROOT / "scenarios"))
from units.table import UNITS  # noqa: E402

PROMPT = "$ "


@pytest.fixture
def console(lab, tmp_path):
    running = Console(lab, tmp_path)
    yield running
    running.stop()


def shell(console):
    """A terminal with a plain prompt (and no bracketed-paste codes around it), so what it
    shows can be compared whole."""
    terminal = TerminalClient(console)
    assert terminal.receive() == ["attached", "new"]
    terminal.type(f"bind 'set enable-bracketed-paste off'; PS1='{PROMPT}'; PS2=''\n")
    terminal.read_until(f"\x1b[?2004l\r{PROMPT}")  # bracketed paste ends with that line
    return terminal


# ---- the token --------------------------------------------------------------------------

def test_the_page_the_api_and_the_websocket_need_the_token(console):
    status, page = console.request("GET", "/", token=None)
    assert status == 403 and "This page needs the lab console's token" in page
    assert console.request("GET", "/?token=wrong", token=None)[0] == 403
    assert console.request("GET", "/api/units", token=None) == (
        403, {"error": "This needs the lab console's token: open the URL the console printed."})
    assert console.request("GET", "/api/units", token="wrong")[0] == 403
    assert console.request("PUT", "/api/files/handler.py", {"text": "x"}, token="wrong")[0] == 403
    assert console.request("POST", "/api/grade", b"", token=None)[0] == 403
    with pytest.raises(HTTPClientError) as refused:
        TerminalClient(console, token=None)
    assert refused.value.code == 403
    with pytest.raises(HTTPClientError) as refused:
        TerminalClient(console, token="wrong")
    assert refused.value.code == 403
    # Nothing was changed by the refused requests.
    assert (console.lab.workstation / "handler.py").read_bytes() == HANDLERS["starting"].read_bytes()


def test_the_token_in_the_url_becomes_a_cookie_and_leaves_the_address_bar(console):
    connection = http.client.HTTPConnection("127.0.0.1", console.port)
    connection.request("GET", f"/?token={TOKEN}")
    answer = connection.getresponse()
    assert (answer.status, answer.getheader("Location")) == (302, "/")
    cookie = answer.getheader("Set-Cookie")
    assert re.fullmatch(r"nightjar-console=[0-9a-f]{64}; HttpOnly; Path=/; SameSite=Strict", cookie), cookie
    assert TOKEN not in cookie
    value = cookie.split(";")[0]
    status, page = console.request("GET", "/", headers={"Cookie": value}, token=None)
    assert status == 200 and "<h1>Nightjar lab console</h1>" in page
    assert console.request("GET", "/api/units", headers={"Cookie": value}, token=None)[0] == 200
    terminal = TerminalClient(console, headers={"Cookie": value}, token=None)
    assert terminal.receive() == ["attached", "new"]
    terminal.close()
    assert console.request("GET", "/", headers={"Cookie": "nightjar-console=" + "0" * 64}, token=None)[0] == 403


def test_the_token_is_made_once_kept_private_and_printed_only_in_the_url(lab, tmp_path):
    console = Console(lab, tmp_path, agent=False)
    console.stop()
    env = dict(console.env)
    del env["NIGHTJAR_CONSOLE_TOKEN"]
    first = subprocess.run([sys.executable, "-m", "nightjar_console", "url"], env=env, capture_output=True, text=True)
    token_file = console.data / "token"
    token = token_file.read_text().strip()
    assert first.stdout == f"http://127.0.0.1:{console.port}/?token={token}\n" and len(token) >= 40
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    again = subprocess.run([sys.executable, "-m", "nightjar_console", "url"], env=dict(env, NIGHTJAR_LAB_PORT="9999"),
                           capture_output=True, text=True)
    assert again.stdout == f"http://127.0.0.1:9999/?token={token}\n"  # the same token, the host's port

    # The console's log: the URL on a line of its own, and the token nowhere else, whatever was asked.
    log = open(tmp_path / "served.log", "wb")
    served = subprocess.Popen([sys.executable, "-m", "nightjar_console"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        Console.wait_until_answers(console.url + "healthz")
        console.request("GET", f"/?token={token}", token=None)
        console.request("GET", "/?token=guess", token=None)
        console.request("GET", "/api/units", token=token)
        console.request("GET", "/api/files/nope.py", token=token)
    finally:
        served.terminate()
        served.wait()
    shown = (tmp_path / "served.log").read_text()
    assert shown.splitlines()[:2] == ["The lab console is ready. Open it in your browser:",
                                      f"http://127.0.0.1:{console.port}/?token={token}"], shown
    assert shown.count(token) == 1 and "guess" not in shown, shown


# ---- the Origin rule ---------------------------------------------------------------------

def test_a_foreign_origin_is_refused_on_the_websocket_and_on_every_change(console):
    for origin in ("http://evil.example", f"http://127.0.0.1:{console.port + 1}", "null"):
        with pytest.raises(HTTPClientError) as refused:
            TerminalClient(console, origin=origin)
        assert refused.value.code == 403, origin
        status, answer = console.request("PUT", "/api/files/handler.py", {"text": "# mine\n"},
                                         headers={"Origin": origin})
        assert status == 403, origin
        assert console.request("POST", "/api/units/2/setup", {}, headers={"Origin": origin})[0] == 403
    assert (console.lab.workstation / "handler.py").read_bytes() == HANDLERS["starting"].read_bytes()
    # The console's own origin; and a script that sends the token but no Origin (a browser
    # always sends one, so no other site's page can be such a client).
    for origin in (f"http://127.0.0.1:{console.port}", None):
        terminal = TerminalClient(console, origin=origin)
        assert terminal.receive()[0] == "attached"
        terminal.close()


def test_an_origin_given_in_nightjar_console_origins_is_accepted(lab, tmp_path):
    console = Console(lab, tmp_path, extra_env={"NIGHTJAR_CONSOLE_ORIGINS": "https://lab-8080.example.dev"})
    try:
        terminal = TerminalClient(console, origin="https://lab-8080.example.dev")
        assert terminal.receive()[0] == "attached"
        terminal.close()
        with pytest.raises(HTTPClientError):
            TerminalClient(console, origin="https://other-8080.example.dev")
    finally:
        console.stop()


# ---- bad input -----------------------------------------------------------------------------

def test_every_endpoint_answers_bad_input_with_a_clear_error(console):
    units = "1, 2, 3, cl-13-2, cl-13-3"
    assert console.request("GET", "/api/units/9/guide") == (404, {"error": f"no lab unit '9': the units are {units}"})
    assert console.request("POST", "/api/units/unit9/check", {}) == (
        404, {"error": f"no lab unit 'unit9': the units are {units}"})
    assert console.request("POST", "/api/units/2/setup", {"lang": "fr"}) == (400, {"error": "no language 'fr': ja or en"})
    assert console.request("GET", "/api/units/2/guide?lang=fr") == (400, {"error": "no guide in 'fr': ja or en"})
    assert console.request("POST", "/api/units/2/check", b"not json") == (400, {"error": "the body is not JSON"})
    assert console.request("POST", "/api/units/2/check", [1]) == (400, {"error": "the body must be a JSON object"})
    for name in ("desk.py", "worker.py", "..%2Fnightjar.db", ".backups"):
        assert console.request("GET", f"/api/files/{name}") == (
            404, {"error": f"only handler.py can be opened here, not {name.replace('%2F', '/')!r}"}), name
    assert console.request("PUT", "/api/files/common.py", {"text": "x = 1\n"}) == (
        404, {"error": "only handler.py can be opened here, not 'common.py'"})
    assert console.request("PUT", "/api/files/handler.py", {"words": "x"}) == (
        400, {"error": 'the body needs "text": the new handler.py'})
    assert console.request("PUT", "/api/files/handler.py", {"text": "#" * (256 * 1024 + 1)}) == (
        413, {"error": "handler.py may be at most 256 KiB"})
    assert console.request("PUT", "/api/files/handler.py", b"x" * (3 * 1024 * 1024))[0] == 413
    assert console.request("GET", "/api/nothing")[0] == 404
    assert (console.lab.workstation / "common.py").read_bytes() == (ROOT / "ticket-desk/common.py").read_bytes()
    assert (console.lab.workstation / "handler.py").read_bytes() == HANDLERS["starting"].read_bytes()


def test_a_unit_script_says_when_the_workstation_does_not_answer(lab, tmp_path):
    console = Console(lab, tmp_path, agent=False)
    try:
        status, answer = console.request("POST", "/api/units/2/check", {})
        assert status == 503 and answer["error"].startswith(
            "Cannot check unit 2: the Workstation does not answer yet (its terminal agent starts with it;"), answer
        terminal = TerminalClient(console)
        message = terminal.receive()
        assert message[0] == "unavailable" and message[1].startswith(
            "The terminal is not ready: the Workstation does not answer yet"), message
        assert terminal.receive() is None  # and the console closes it; the page tries again
    finally:
        console.stop()


# ---- the editor ------------------------------------------------------------------------------

def test_the_editor_saves_handler_py_even_with_a_syntax_error_and_says_where(console):
    path = console.lab.workstation / "handler.py"
    status, opened = console.request("GET", "/api/files/handler.py")
    assert status == 200 and opened["text"] == path.read_text() and opened["problem"] is None
    broken = "from common import checkpoint\n\ndef handle(ch, delivery, job, db, pause)\n    pass\n"
    status, saved = console.request("PUT", "/api/files/handler.py", {"text": broken, "version": opened["version"]})
    assert (status, saved["saved"], saved["problem"]) == (
        200, True, {"line": 3, "column": 41, "message": "expected ':'"}), saved
    assert path.read_text() == broken
    # Changed in the terminal meanwhile: not overwritten unless the learner says so.
    path.write_text("# typed in the terminal\n")
    status, conflict = console.request("PUT", "/api/files/handler.py", {"text": "# from the editor\n",
                                                                         "version": saved["version"]})
    assert status == 409 and conflict["error"] == "handler.py changed in the Workstation since the editor opened it"
    assert path.read_text() == "# typed in the terminal\n"
    status, forced = console.request("PUT", "/api/files/handler.py", {"text": "# from the editor\n",
                                                                       "version": saved["version"], "force": True})
    assert status == 200 and forced["problem"] is None and path.read_text() == "# from the editor\n"


# ---- the terminal -------------------------------------------------------------------------------

def test_the_terminal_is_bash_on_a_pty_in_the_workstation_with_its_environment(console):
    terminal = shell(console)
    terminal.type("pwd; echo $NIGHTJAR_QUEUE; tty; stty size\n")
    shown = terminal.read_until(f"\n{PROMPT}")
    assert re.fullmatch(rf"pwd; echo \$NIGHTJAR_QUEUE; tty; stty size\r\n{re.escape(str(console.lab.workstation))}\r\n"
                        rf"{re.escape(console.lab.queue)}\r\n/dev/pts/\d+\r\n24 80\r\n{re.escape(PROMPT)}", shown), shown
    terminal.send("size", 30, 100)  # the page's terminal was resized: bash draws its line again
    assert terminal.read_until(f"\r{PROMPT}") == f"\r\x1b[K\r{PROMPT}"
    terminal.type("stty size\n")
    assert terminal.read_until(f"\n{PROMPT}") == f"stty size\r\n30 100\r\n{PROMPT}"
    terminal.close()


def test_ctrl_c_at_a_pause_is_sigint_and_the_delivery_comes_back(console):
    """The seed's unit 2 in the terminal: Ctrl+C at Paused before-write., echo $? prints 130,
    and the next worker run gets the delivery again with redelivered=True."""
    console.lab.use_handler("unit2")
    registration_id = console.lab.register("Retry guest")
    terminal = shell(console)
    terminal.type("python3 worker.py --pause before-write\n")
    shown = terminal.read_until("Paused before-write.\r\n")
    terminal.type("\x03")
    shown += terminal.read_until(f"\n{PROMPT}")
    terminal.type("echo $?\n")
    shown += terminal.read_until(f"\n{PROMPT}")
    terminal.type("python3 worker.py\n")
    shown += terminal.read_until(f"\n{PROMPT}")
    assert shown == ("python3 worker.py --pause before-write\r\n"
                     f"Received {registration_id} redelivered=False\r\n"
                     "Paused before-write.\r\n"
                     "^C\r\n"
                     f"{PROMPT}echo $?\r\n"
                     "130\r\n"
                     f"{PROMPT}python3 worker.py\r\n"
                     f"Received {registration_id} redelivered=True\r\n"
                     "Handler returned.\r\n"
                     f"{PROMPT}")
    assert [ticket.registration_id for ticket in console.lab.tickets(registration_id)] == [registration_id]
    terminal.close()


def test_a_second_connection_sees_the_same_shell_and_a_reload_gets_it_back(console):
    first = shell(console)
    second = TerminalClient(console)
    assert second.receive() == ["attached", "same"]
    replay = second.receive()
    assert replay[0] == "stdout" and replay[1].endswith(PROMPT)  # what the shell showed lately
    second.type("echo from the second tab\n")
    assert first.read_until(f"from the second tab\r\n{PROMPT}").endswith(
        f"echo from the second tab\r\nfrom the second tab\r\n{PROMPT}")
    first.close()
    second.close()
    # A reload: the same shell, with its variables, still there.
    again = TerminalClient(console)
    assert again.receive() == ["attached", "same"]
    assert again.receive()[1].endswith(f"from the second tab\r\n{PROMPT}")  # shown again
    again.type('echo "[$PS1]"\n')
    assert again.read_until(f"\n{PROMPT}") == f'echo "[$PS1]"\r\n[{PROMPT}]\r\n{PROMPT}'
    # exit ends the shell; the next connection starts a new one and says so.
    again.type("exit\n")
    while (message := again.receive()) is not None and message[0] != "ended":
        pass
    assert message == ["ended", 0]
    again.close()
    fresh = TerminalClient(console)
    assert fresh.receive() == ["attached", "new"]
    fresh.close()


def test_the_agent_refuses_what_it_does_not_serve(console):
    assert stat.S_IMODE(os.stat(console.socket).st_mode) == 0o600
    assert unix_request(console.socket, {"run": "reset", "unit": "2"}) == ["error", "unknown unit script"]
    # A lesson has no ./solve the console runs (its guide walks it): the unit's alone.
    assert unix_request(console.socket, {"run": "solve", "unit": "cl-13-2"}) == ["error", "unknown unit script"]
    assert unix_request(console.socket, {"run": "check", "unit": "../../etc"}) == ["error", "unknown unit script"]
    assert unix_request(console.socket, {"terminal": {"rows": 0, "cols": 80}}) == [
        "error", "rows and cols must be whole numbers from 1 to 1000"]
    assert unix_request(console.socket, ["stdin", "ls\n"]) == [
        "error", "the first line must ask for the terminal or a unit script"]


# ---- the units' scripts ----------------------------------------------------------------------------

def test_setup_and_check_run_the_units_own_scripts_and_a_pass_is_kept(console):
    status, set_up = console.request("POST", "/api/units/1/setup", {"lang": "en"})
    workstation, database = console.lab.workstation, console.lab.db_path
    assert (status, set_up["status"], set_up["lines"]) == (200, 0, [
        "Setting up Unit 1 · Follow a registration to its ticket",
        f"Workstation {workstation}:",
        "  handler.py: already the unit's starting version",
        f"Database {database}: created at the unit's start",
        "  R-0001  Mina Patel: ticket 1",
        f"Queue {console.lab.queue}: nothing queued",
        "Ready: the guide is scenarios/unit1-trace-registration/README.md. Workstation: the terminal on this page"])
    status, checked = console.request("POST", "/api/units/1/check", {"lang": "en"})
    assert (status, checked["status"], checked["done"]) == (200, 1, False)
    assert checked["lines"][-1] == "Unit 1 is not done yet. The guide: scenarios/unit1-trace-registration/README.md"
    assert console.request("GET", "/api/units")[1]["current"] == "1"

    for name in UNITS[1].goal_guests:
        console.lab.register(name)
    assert console.lab.run("worker.py", "--drain").returncode == 0
    status, checked = console.request("POST", "/api/units/1/check", {"lang": "ja"})
    assert (status, checked["status"], checked["done"], checked["lines"]) == (200, 0, True, [UNITS[1].done])
    units = console.request("GET", "/api/units")[1]["units"]
    assert [(unit["key"], unit["passed"]) for unit in units] == [
        ("1", True), ("2", False), ("3", False), ("cl-13-2", False), ("cl-13-3", False)]
    # Kept in the console's folder: a console started again still knows.
    console.stop()
    again = Console(console.lab, console.folder, agent=False)
    try:
        assert [unit["passed"] for unit in again.request("GET", "/api/units")[1]["units"]][0] is True
    finally:
        again.stop()


def test_the_guide_is_the_units_readme_as_html_with_raw_html_shown_as_text(console):
    status, guide = console.request("GET", "/api/units/2/guide?lang=ja")
    assert status == 200 and guide["html"].startswith("<h3>単元2 · 完了した処理だけを確認する</h3>\n")
    assert "<pre><code class=\"language-sh\">cat &gt; handler.py &lt;&lt;'PYTHON'\n" in guide["html"]
    status, english = console.request("GET", "/api/units/cl-13-2/guide", headers={"Accept-Language": "en-GB,en"})
    assert status == 200 and english["lang"] == "en" and "<h3>CL-13-2 · Queue redelivery" in english["html"]
    status, chosen = console.request("GET", "/api/units/3/guide", headers={"Accept-Language": "ja,en;q=0.5"})
    assert chosen["lang"] == "ja"


def test_the_guide_shows_what_works_in_the_console(console):
    """No block for a host's terminal; "Where things are" with the console's column, the whole
    table folded below it. (make unit still prints the README whole: test_guides.py.)"""
    for lang, other_ways, where_to_type in (
            ("en", "The other ways of running the lab (make up, make local)", "open a terminal in the repository"),
            ("ja", "ラボのほかの動かし方(make up、make local)", "リポジトリで端末を開いて")):
        html = console.request("GET", f"/api/units/1/guide?lang={lang}")[1]["html"]
        assert "source ../../.venv/bin/activate\n</code>" not in html and where_to_type not in html
        shown, folded = html.split(f'<details class="other-ways"><summary>{other_ways}</summary>\n')
        console_table = shown[shown.rindex("<table>"):]
        assert console_table.count("<th>") == 2 and console_table.count("<td>") == 3 * 2
        assert folded.split("</table>")[0].count("<th>") == 4
        assert "<strong>RabbitMQ management</strong>" in console_table  # this console has the link
