"""VS Code Dev Containers and Codespaces open the lab (.devcontainer/), tried with the Dev
Containers CLI (`devcontainer up`, from the npm registry) against the real Docker engine.

What a codespace needs is checked from inside the main container: VS Code runs in the
Workstation, in the learner's folder as the learner's user, and the ports it forwards
(console:8080, site:8000, rabbitmq:15672) are reachable from there; the terminal shows the
console's address with its token. Marked `containers`.
"""

import json
import os
import re
import urllib.request

import pytest

from nightjar.harness.rabbitnode import free_port
from stackkit import ROOT, base_images, cannot_run, copy_checkout, require_engine, run

pytestmark = pytest.mark.containers

# scripts/prepare-tests installs tests/devcontainer/package.json.
CLI = ROOT / "tests" / "devcontainer" / "node_modules" / ".bin" / "devcontainer"
FORWARDED = ["console:8080", "site:8000", "rabbitmq:15672"]
REACH = ("import socket\n"
         "for target in {targets!r}:\n"
         "    host, port = target.split(':')\n"
         "    socket.create_connection((host, int(port)), timeout=10).close()\n"
         "    print(target, 'reachable')\n")


def devcontainer_settings():
    """devcontainer.json, less its comment lines (JSON with comments)."""
    text = (ROOT / ".devcontainer" / "devcontainer.json").read_text()
    return json.loads("\n".join(line for line in text.splitlines() if not line.lstrip().startswith("//")))


def test_devcontainer_json_forwards_the_console_the_site_and_the_management_ui():
    settings = devcontainer_settings()
    assert settings["dockerComposeFile"] == ["../compose.yaml", "compose.yaml"]
    assert (settings["service"], settings["workspaceFolder"], settings["remoteUser"]) == (
        "workstation", "/home/labex/project/ticket-desk", "labex")
    assert settings["forwardPorts"] == FORWARDED


def test_devcontainer_up_opens_the_lab(tmp_path):
    require_engine()
    if not CLI.exists():
        cannot_run(f"no Dev Containers CLI at {CLI}: scripts/prepare-tests installs it (npm)")
    checkout = copy_checkout(tmp_path / "nightjar-devcontainer-test")
    env = {name: value for name, value in os.environ.items() if not name.startswith(("NIGHTJAR_", "COMPOSE"))}
    ports = {name: str(free_port()) for name in
             ("NIGHTJAR_LAB_PORT", "NIGHTJAR_SITE_PORT", "NIGHTJAR_AMQP_PORT", "NIGHTJAR_MANAGEMENT_PORT")}
    env.update(ports, **base_images(env))
    project = None
    try:
        up = run([str(CLI), "up", "--workspace-folder", str(checkout)], env, timeout=900)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        outcome = json.loads(up.stdout.strip().splitlines()[-1])
        project = outcome["composeProjectName"]
        assert (outcome["outcome"], outcome["remoteUser"], outcome["remoteWorkspaceFolder"]) == (
            "success", "labex", "/home/labex/project/ticket-desk"), outcome
        # The postAttachCommand: the terminal shows the console's address, token included.
        shown = re.search(r"Lab console: (http://127\.0\.0\.1:(\d+)/\?token=([\w-]{40,}))", up.stderr)
        assert shown and shown.group(2) == ports["NIGHTJAR_LAB_PORT"], up.stderr[-2000:]

        inside = run([str(CLI), "exec", "--workspace-folder", str(checkout), "python3", "-c",
                      "import os; print(os.getcwd(), os.getuid())\n" + REACH.format(targets=FORWARDED)], env)
        assert inside.stdout.splitlines()[-4:] == ["/home/labex/project/ticket-desk 1000"] + [
            f"{target} reachable" for target in FORWARDED], inside
        browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())  # the token becomes a cookie
        with browser.open(shown.group(1), timeout=30) as page:
            assert page.status == 200 and b"<h1>Nightjar lab console</h1>" in page.read()
    finally:
        if project:
            run(["docker", "compose", "--project-name", project, "-f", str(checkout / "compose.yaml"),
                 "-f", str(checkout / ".devcontainer" / "compose.yaml"), "down", "--volumes", "--timeout", "5"], env)
