"""The seed's site walkthrough in a real browser (Chromium), against the real site and worker."""

import re

import pytest
from playwright.sync_api import expect

from browserkit import AXE, document_screenshot, needs_chromium
from labkit import ticket_rows
from sitekit import ARTIFACTS, Site

pytestmark = needs_chromium


@pytest.fixture
def site(lab):
    running = Site(lab)
    yield running
    running.stop()


def shot(page, name):
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"site-{name}.png"), full_page=True)


def main_link(page, name):
    return page.get_by_role("main").get_by_role("link", name=name, exact=True)


def register(page, site, name):
    page.goto(site.url + "evening")
    page.get_by_label("Guest name").fill(name)
    page.get_by_role("button", name="Register for the evening").click()
    expect(page).to_have_url(re.compile(r"/registrations/R-\d{4}$"))
    return page.url.rsplit("/", 1)[1]


def download_text(page):
    with page.expect_download() as info:
        main_link(page, "Download ticket").click()
    download = info.value
    return download.suggested_filename, open(download.path(), encoding="utf-8").read()


def test_registration_to_downloaded_ticket(lab, site, page):
    page.goto(site.url)
    expect(page.get_by_role("heading", level=1)).to_have_text("Nightjar Print Studio")
    shot(page, "home")
    main_link(page, "Explore the evening").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Explore the evening")
    main_link(page, "Plan your visit").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Plan your visit")
    main_link(page, "The evening").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("The evening")
    shot(page, "the-evening")

    page.get_by_label("Guest name").fill("Normal guest")
    page.get_by_role("button", name="Register for the evening").click()
    expect(page).to_have_url(site.url + "registrations/R-0002")
    expect(page.get_by_role("heading", level=1)).to_have_text("R-0002")
    expect(page.locator(".guest-name")).to_have_text("Normal guest")
    expect(page.get_by_role("heading", name="Your ticket is being prepared")).to_be_visible()
    expect(main_link(page, "Open ticket")).to_have_count(0)
    shot(page, "registration-preparing")

    worker = lab.run("worker.py")
    assert worker.stdout == "Received R-0002 redelivered=False\nHandler returned.\n"
    # No click: the page refreshes itself while the ticket is being prepared.
    expect(main_link(page, "Open ticket")).to_be_visible(timeout=10_000)
    expect(page.get_by_role("heading", name="Your ticket is being prepared")).to_have_count(0)
    shot(page, "registration-ready")

    main_link(page, "Open ticket").click()
    expect(page).to_have_url(site.url + "tickets/2")
    expect(page.locator(".registration-id")).to_have_text("R-0002")
    expect(page.locator(".guest-name")).to_have_text("Normal guest")
    shot(page, "ticket")
    filename, text = download_text(page)
    assert filename == "nightjar-R-0002-ticket-2.txt"
    assert "Registration: R-0002\n" in text and "Guest name: Normal guest\n" in text
    assert "Ticket number: 2\n" in text

    main_link(page, "Back to registration").click()
    expect(page).to_have_url(site.url + "registrations/R-0002")

    # The seed's way back: Your registrations, Normal guest, Open ticket.
    page.get_by_role("navigation").get_by_role("link", name="Your registrations").click()
    main_link(page, "Normal guest").click()
    expect(page).to_have_url(site.url + "registrations/R-0002")
    main_link(page, "Open ticket").click()
    expect(page).to_have_url(site.url + "tickets/2")

    # Mina Patel's ticket is kept and still opens.
    page.get_by_role("navigation").get_by_role("link", name="Your registrations").click()
    main_link(page, "R-0001").click()
    main_link(page, "Open ticket").click()
    expect(page.locator(".guest-name")).to_have_text("Mina Patel")
    _, text = download_text(page)
    assert "Registration: R-0001\n" in text and "Guest name: Mina Patel\n" in text

    # Two guests with the same name: two registrations.
    first, second = register(page, site, "Same name"), register(page, site, "Same name")
    assert (first, second) == ("R-0003", "R-0004")

    # Processing R-0002 again with the starting (unsafe) handler writes a
    # duplicate ticket; the site shows both and says which is the extra one.
    assert lab.run("desk.py", "retry", "R-0002").returncode == 0
    assert lab.run("worker.py", "--drain").returncode == 0
    page.goto(site.url + "registrations/R-0002")
    expect(page.get_by_role("heading", level=2).first).to_have_text("This registration has 2 tickets")
    expect(main_link(page, "Open ticket")).to_have_count(2)
    expect(page.locator(".tickets li.duplicate")).to_contain_text("Duplicate")
    shot(page, "registration-duplicate")

    page.get_by_role("navigation").get_by_role("link", name="Your registrations").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Your registrations")
    rows = page.locator("table.registrations tbody tr")
    expect(rows).to_have_count(4)
    expect(rows.locator("td:first-child")).to_have_text(["R-0001", "R-0002", "R-0003", "R-0004"])
    expect(rows.locator("td.guest-name")).to_have_text(
        ["Mina Patel", "Normal guest", "Same name", "Same name"])
    expect(page.locator("#R-0002")).to_contain_text("Duplicate tickets (2)")
    page.locator("#R-0002").get_by_role("link", name="Duplicate tickets (2): delivery history").click()
    expect(page).to_have_url(site.url + "registrations/R-0002#delivery-history")
    expect(page.get_by_role("region", name="Delivery history").locator(".history-text li")).to_have_count(2)
    page.go_back()
    shot(page, "your-registrations")
    assert [row[1:] for row in ticket_rows(lab.tickets())] == [
        ("R-0001", "Mina Patel"), ("R-0002", "Normal guest"), ("R-0003", "Same name"),
        ("R-0004", "Same name"), ("R-0002", "Normal guest")]


def test_names_are_shown_exactly_and_never_run(lab, site, page):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    names = ["<script>alert(1)</script>", "Robert'); DROP TABLE registrations;--",
             "日本語のゲスト", "Guest 🦉✨"]
    ids = [register(page, site, name) for name in names]
    for registration_id, name in zip(ids, names):
        page.goto(site.url + "registrations/" + registration_id)
        expect(page.locator(".guest-name")).to_have_text(name)
    page.goto(site.url + "registrations")
    expect(page.locator("td.guest-name")).to_have_text(["Mina Patel", *names])
    shot(page, "names-escaped")
    assert dialogs == []
    assert lab.run("worker.py", "--drain").returncode == 0
    page.goto(site.url + "registrations/" + ids[0])
    main_link(page, "Open ticket").click()
    expect(page.locator(".guest-name")).to_have_text(names[0])
    assert dialogs == []


@pytest.mark.skipif(not AXE.exists(), reason=f"no axe-core at {AXE}: scripts/prepare-tests installs it")
def test_the_delivery_history_after_ctrl_c_and_redelivery_reads_and_passes_axe(lab, site, browser):
    lab.use_handler("unit2")
    context = browser.new_context(bypass_csp=True)  # axe-core is added to the page as a script
    page = context.new_page()
    registration_id = register(page, site, "Retry guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    history = page.get_by_role("region", name="Delivery history")
    # The page refreshes itself: the paused delivery appears, still open.
    expect(history.locator(".history-text li")).to_have_text(
        [re.compile(r"^\+0\.0 s · delivery 1 · redelivered=False · paused at before-write · still open")],
        timeout=10_000)
    assert worker.interrupt() == 130
    assert lab.run("worker.py").stdout == f"Received {registration_id} redelivered=True\nHandler returned.\n"

    expect(main_link(page, "Open ticket")).to_have_count(1, timeout=10_000)
    expect(history.locator(".history-text li")).to_have_text([
        re.compile(r"^\+0\.0 s · delivery 1 · redelivered=False · paused at before-write"
                   r" · stopped by Ctrl\+C \(not acknowledged\)$"),
        re.compile(r"^\+\d+\.\d s · delivery 2 · redelivered=True · ticket 2 committed · acked$")])
    picture = history.get_by_role("img", name=f"Delivery history of {registration_id}")
    expect(picture.locator(".delivery")).to_have_text(["Delivery 1", "Delivery 2"])
    expect(picture.locator(".flag")).to_have_text(["redelivered=False", "redelivered=True"])
    expect(picture.locator(".step text")).to_have_text([
        "Paused at before-write", "Stopped by Ctrl+C", "Not acknowledged",
        "Ticket 2 written", "Acknowledged"])
    expect(page.locator("meta[http-equiv=refresh]")).to_have_count(0)  # nothing open: no refresh
    shot(page, "delivery-history")
    document_screenshot(page, "site-delivery-history")

    page.add_script_tag(path=str(AXE))
    results = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    assert [(v["id"], [n["target"] for n in v["nodes"]]) for v in results["violations"]] == []
    checked = {rule["id"] for rule in results["passes"]}
    assert {"svg-img-alt", "color-contrast", "list", "region"} - checked == set(), sorted(checked)

    # A new delivery of the ticketed registration, paused: the page refreshes while it is open.
    lab.deliver_again(registration_id)
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    page.reload()
    expect(page.locator("meta[http-equiv=refresh]")).to_have_count(1)
    assert worker.interrupt() == 130
    expect(history.locator(".history-text li")).to_have_count(3, timeout=10_000)
    expect(history.locator(".history-text li").last).to_contain_text("stopped by Ctrl+C (not acknowledged)")
    context.close()
