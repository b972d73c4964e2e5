"""Bad and unusual input, CSRF, unknown pages and the secret key, through Flask's test client.

The registrations still go through the real queueing code to the real broker.
"""

import dataclasses
import os
import re
import stat
import subprocess
import sys

import pytest

from nightjar.registrations import MAX_NAME_LENGTH
from nightjar_site import create_app
from sitekit import CSRF, Site


@pytest.fixture
def app(lab):
    return create_app({"NIGHTJAR": lab.settings, "SECRET_KEY": "test-secret", "TESTING": True})


@pytest.fixture
def client(app):
    return app.test_client()


def token(client):
    return CSRF.search(client.get("/evening").get_data(as_text=True)).group(1)


def post(client, name, csrf=None):
    data = {"name": name}
    if csrf is not False:
        data["csrf_token"] = token(client) if csrf is None else csrf
    return client.post("/evening", data=data)


def names_in_db(lab):
    db = lab.db()
    try:
        return [row[0] for row in db.execute("SELECT name FROM registrations ORDER BY id")]
    finally:
        db.close()


@pytest.mark.parametrize("name, message", [
    ("", "Please enter a guest name."),
    ("   \t  ", "Please enter a guest name."),
    ("x" * (MAX_NAME_LENGTH + 1), f"A guest name can be at most {MAX_NAME_LENGTH} characters."),
    ("Tab\x07bell", "A guest name cannot contain control characters."),
])
def test_bad_names_are_refused_with_the_form_again(lab, client, name, message):
    response = post(client, name)
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert f'<p class="error" role="alert" id="name-error">{message}</p>' in page
    assert '<label for="name">Guest name</label>' in page
    assert "Register for the evening</button>" in page
    assert CSRF.search(page), "the form comes back with a fresh token"
    assert names_in_db(lab) == ["Mina Patel"]
    assert lab.depth() == (0, 0)


@pytest.mark.parametrize("name, escaped", [
    ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
    ("Robert'); DROP TABLE registrations;--", "Robert&#39;); DROP TABLE registrations;--"),
    ("日本語のゲスト", "日本語のゲスト"),
    ("Guest 🦉✨", "Guest 🦉✨"),
    ("  Trimmed   guest ", "Trimmed guest"),
    ("y" * MAX_NAME_LENGTH, "y" * MAX_NAME_LENGTH),
])
def test_unusual_names_are_stored_and_shown_exactly(lab, client, name, escaped):
    response = post(client, name)
    assert response.status_code == 303
    assert response.headers["Location"] == "/registrations/R-0002"
    stored = " ".join(name.split())
    assert names_in_db(lab) == ["Mina Patel", stored]
    page = client.get("/registrations/R-0002").get_data(as_text=True)
    assert f'<dd class="guest-name">{escaped}</dd>' in page
    assert "<script>alert" not in page
    listing = client.get("/registrations").get_data(as_text=True)
    assert f'<td class="guest-name"><a href="/registrations/R-0002">{escaped}</a></td>' in listing
    assert lab.depth() == (1, 0)
    # The worker writes the ticket; the download holds the name exactly, as text.
    assert lab.run("worker.py").returncode == 0
    download = client.get("/tickets/2/download")
    assert download.mimetype == "text/plain"
    assert download.headers["X-Content-Type-Options"] == "nosniff"
    assert f"Guest name: {stored}\n" in download.get_data(as_text=True)


def test_registrations_table_survives_the_sql_name(lab, client):
    post(client, "Robert'); DROP TABLE registrations;--")
    post(client, "Next guest")
    assert names_in_db(lab) == ["Mina Patel", "Robert'); DROP TABLE registrations;--", "Next guest"]


@pytest.mark.parametrize("csrf", [False, "not-a-token", ""])
def test_form_without_a_valid_csrf_token_is_refused(lab, client, csrf):
    client.get("/evening")  # a session exists; only the token is missing or wrong
    response = post(client, "Forged guest", csrf=csrf)
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert "This form has expired or did not come from this site, so nothing was saved." in page
    assert '<label for="name">Guest name</label>' in page
    assert names_in_db(lab) == ["Mina Patel"]
    assert lab.depth() == (0, 0)


def test_token_of_another_session_is_refused(lab, app):
    stolen = token(app.test_client())
    response = post(app.test_client(), "Forged guest", csrf=stolen)
    assert response.status_code == 400
    assert names_in_db(lab) == ["Mina Patel"]


@pytest.mark.parametrize("path", [
    "/registrations/R-9999", "/registrations/r-0001", "/registrations/R-0001'--",
    "/tickets/999", "/tickets/0", "/tickets/abc", "/tickets/999/download", "/nowhere",
])
def test_unknown_pages_get_the_sites_404(client, path):
    response = client.get(path)
    assert response.status_code == 404
    page = response.get_data(as_text=True)
    assert "<h1>Page not found</h1>" in page
    assert '/static/style.css' in page and "Your registrations" in page


def test_page_texts_and_links(client):
    home = client.get("/").get_data(as_text=True)
    assert '<a class="button" href="/explore">Explore the evening</a>' in home
    assert '<a class="button" href="/visit">Plan your visit</a>' in client.get("/explore").get_data(as_text=True)
    assert '<a class="button" href="/evening">The evening</a>' in client.get("/visit").get_data(as_text=True)
    for path in ("/", "/explore", "/visit", "/evening", "/registrations", "/registrations/R-0001",
                 "/tickets/1", "/nowhere"):
        assert '<a href="/registrations">Your registrations</a>' in client.get(path).get_data(as_text=True)
    ticket = client.get("/tickets/1").get_data(as_text=True)
    assert '>Download ticket</a>' in ticket
    assert '<a href="/registrations/R-0001">Back to registration</a>' in ticket
    download = client.get("/tickets/1/download")
    assert download.headers["Content-Disposition"] == 'attachment; filename="nightjar-R-0001-ticket-1.txt"'
    assert download.get_data(as_text=True) == (
        "Nightjar Print Studio\nEntry ticket for The evening\n\nRegistration: R-0001\n"
        "Guest name: Mina Patel\nTicket number: 1\nIssued: 2026-01-01T00:00:00Z\n")
    assert client.get("/healthz").get_data(as_text=True) == "ok\n"
    assert "refresh" not in client.get("/registrations/R-0001").get_data(as_text=True)


def test_healthz_fails_when_the_database_cannot_open(lab, tmp_path):
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    settings = dataclasses.replace(lab.settings, db_path=str(blocked / "nightjar.db"))
    app = create_app({"NIGHTJAR": settings, "SECRET_KEY": "x"})
    assert app.test_client().get("/healthz").status_code == 503


def test_secret_key_is_generated_once_beside_the_database(lab, monkeypatch):
    monkeypatch.delenv("NIGHTJAR_SECRET_KEY", raising=False)
    first = create_app({"NIGHTJAR": lab.settings}).config["SECRET_KEY"]
    second = create_app({"NIGHTJAR": lab.settings}).config["SECRET_KEY"]
    key_file = lab.tmp / "site-secret-key"
    assert first == second == key_file.read_text().strip()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    monkeypatch.setenv("NIGHTJAR_SECRET_KEY", "from-the-environment")
    assert create_app({"NIGHTJAR": lab.settings}).config["SECRET_KEY"] == "from-the-environment"


def test_a_delivery_history_that_cannot_be_read_leaves_the_page_working(client, lab, monkeypatch):
    registration_id = lab.register("Careful guest")
    page = client.get(f"/registrations/{registration_id}").get_data(as_text=True)
    assert "No delivery of this registration has been recorded yet." in page
    monkeypatch.setenv("NIGHTJAR_HISTORY", str(lab.folder))  # a folder where the file should be
    response = client.get(f"/registrations/{registration_id}")
    assert response.status_code == 200
    assert "The delivery history cannot be read right now" in response.get_data(as_text=True)


def test_a_database_file_replaced_under_the_site_is_opened_afresh(lab, client):
    """The site keeps its connection between requests; a new file at the path is not the old one."""
    assert post(client, "Before the new file").status_code == 303
    assert "Before the new file" in client.get("/registrations").get_data(as_text=True)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{lab.db_path}{suffix}"):
            os.remove(f"{lab.db_path}{suffix}")
    lab.db().close()  # a new database: the seeded Mina Patel alone
    page = client.get("/registrations").get_data(as_text=True)
    assert "Mina Patel" in page and "Before the new file" not in page


def test_the_site_runs_its_threads_on_one_core_and_refuses_a_bad_choice(lab):
    site = Site(lab)
    try:
        with open(f"/proc/{site.process.pid}/status") as status:
            cores = next(line.split(":")[1].strip() for line in status
                         if line.startswith("Cpus_allowed_list:"))
        assert cores.isdigit(), cores
    finally:
        site.stop()
    allowed = ", ".join(map(str, sorted(os.sched_getaffinity(0))))
    for choice in ("two", "4096"):
        result = subprocess.run([sys.executable, "-m", "nightjar_site"], capture_output=True,
                                text=True, timeout=30, env=dict(lab.env, NIGHTJAR_SITE_CPU=choice))
        assert (result.returncode, result.stdout, result.stderr) == (
            1, "", f"NIGHTJAR_SITE_CPU is '{choice}': say \"any\", or one of the cores this site"
                   f" may use: {allowed}\n")
