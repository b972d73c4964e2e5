"""make local / make stop (scripts/local.py), isolated: own var/, Workstation folder, database, port."""

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from consolekit import Console, TerminalClient
from labkit import HANDLERS
from nightjar.harness import processes
from sitekit import ROOT, answers, free_port, node_port

SCRIPT = ROOT / "scripts" / "local.py"


def local(lab, command, **extra):
    env = dict(lab.env, NIGHTJAR_LOCAL_VAR=str(lab.tmp / "var"),
               NIGHTJAR_WORKSTATION=str(lab.tmp / "workstation" / "ticket-desk"),
               NIGHTJAR_SITE_PORT=str(lab.site_port), NIGHTJAR_LAB_PORT=str(lab.lab_port), **extra)
    return subprocess.run([sys.executable, str(SCRIPT), command], env=env, capture_output=True,
                          text=True, timeout=120)


def alive(pid):
    """Running (a stopped process nobody has reaped yet is a zombie: not running)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def status_settles(lab, queue_line, timeout=30):
    """Whether desk.py status, counting with RabbitMQ's management API (the delivery history off),
    shows this queue line within `timeout` seconds (a new queue's first count takes about 10 s)."""
    deadline = time.monotonic() + timeout
    while True:
        last = processes.run(lab.workstation, dict(lab.env, NIGHTJAR_HISTORY="off"),
                             "desk.py", "status").stdout.splitlines()[-1]
        if last == queue_line:
            return True
        if time.monotonic() > deadline:
            print(f"desk.py status still ends with {last!r}")
            return False
        time.sleep(0.5)


def console_page(lab, token, path=""):
    request = urllib.request.Request(f"http://127.0.0.1:{lab.lab_port}/{path}",
                                     headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read().decode()


def console_json(lab, token, path):
    return json.loads(console_page(lab, token, path))


@pytest.fixture
def local_lab(lab):
    lab.site_port, lab.lab_port = free_port(), free_port()
    yield lab
    local(lab, "stop")


def test_make_local_starts_the_site_and_keeps_the_workstation(local_lab):
    lab = local_lab
    url = f"http://127.0.0.1:{lab.site_port}/"
    result = local(lab, "start")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "RabbitMQ: amqp://guest:***@127.0.0.1:5672/%2F (already running)\n" in out
    assert f"The Nightjar site: {url}\n" in out
    token = (lab.tmp / "var" / "console" / "token").read_text().strip()
    console = f"http://127.0.0.1:{lab.lab_port}/?token={token}"
    # As the documentation says (make local): after what it started, a blank line, then the console's address first.
    assert out.split("\n\n")[1].splitlines()[:2] == [f"The lab console: {console}", f"The Nightjar site: {url}"]
    workstation = lab.tmp / "workstation" / "ticket-desk"
    assert f"  cd {workstation}\n" in out
    assert f"  source {ROOT / '.venv' / 'bin' / 'activate'}\n" in out
    assert "  python3 worker.py\n" in out
    assert answers(url)
    copied = {p.name for p in workstation.iterdir()}
    assert {"common.py", "desk.py", "handler.py", "worker.py"} <= copied
    assert (workstation / "handler.py").read_bytes() == (ROOT / "ticket-desk" / "handler.py").read_bytes()
    # The non-default settings are written for the learner's shell to source.
    env_file = lab.tmp / "var" / "local.env"
    assert f"  source {env_file}\n" in out
    assert f"  NIGHTJAR_QUEUE={lab.queue}\n" in out
    assert f"export NIGHTJAR_QUEUE={lab.queue}\n" in env_file.read_text()
    pid = int((lab.tmp / "var" / "site.pid").read_text())
    console_pid = int((lab.tmp / "var" / "console.pid").read_text())
    agent_pid = int((lab.tmp / "var" / "console-agent.pid").read_text())
    # The console's terminal is a shell in the Workstation folder, with the lab's settings and Python.
    terminal = TerminalClient(SimpleNamespace(port=lab.lab_port), token=token)
    assert terminal.receive() == ["attached", "new"]
    terminal.type("echo $PWD $NIGHTJAR_QUEUE; python3 -c 'import pika, nightjar' && echo imports\n")
    terminal.read_until(f"{workstation} {lab.queue}\r\nimports\r\n")
    terminal.close()
    # The page's management link answers, or the page says why there is none, as the guide does.
    page = console_page(lab, token)
    if Console.answers("http://127.0.0.1:15672/"):
        assert 'id="management-link" href="http://127.0.0.1:15672/"' in page
    else:
        assert 'id="management-link"' not in page
        assert ("No RabbitMQ management UI in this lab: <code>python3 desk.py status</code>"
                " in the terminal shows the queue's counts, exactly.") in " ".join(page.split())
        guide = console_json(lab, token, "api/units/1/guide?lang=en")["html"]
        assert "none in this lab (the console gives no link at the top): <code>python3 desk.py status" in guide

    # The Workstation's tools work in the printed setup.
    shell = (f"cd {workstation} && . {ROOT / '.venv' / 'bin' / 'activate'} && . {env_file}"
             " && python3 desk.py register 'Local guest' && python3 worker.py")
    ran = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("NIGHTJAR_")})
    assert ran.stdout == "Registered R-0002 and queued it.\nReceived R-0002 redelivered=False\nHandler returned.\n"

    # make grade grades on the node make local keeps, not on the live broker.
    graded = subprocess.run(
        [sys.executable, "-m", "grader", "--handler", str(HANDLERS["unit3"]), "--skip-live"],
        cwd=ROOT, env=dict(lab.env, NIGHTJAR_LOCAL_VAR=str(lab.tmp / "var")), capture_output=True,
        text=True, timeout=120)
    assert graded.returncode == 0, graded.stdout + graded.stderr
    assert graded.stdout.splitlines()[1].startswith("(the grading node make local keeps, ")
    grading_node = json.loads((lab.tmp / "var" / "grading-node.json").read_text())
    assert urlsplit(grading_node["url"]).port != urlsplit(lab.amqp_url).port

    (workstation / "handler.py").write_text("# my edits\n")
    again = local(lab, "start")
    assert again.returncode == 0
    assert f"The site is already running (pid {pid}).\n" in again.stdout
    assert f"The lab console is already running (pid {console_pid}).\n" in again.stdout
    assert f"The lab console's terminal agent is already running (pid {agent_pid}).\n" in again.stdout
    assert "Grading node: already running (make grade grades on it)\n" in again.stdout
    assert "(kept as it is, with your edits)" in again.stdout

    stopped = local(lab, "stop")
    assert stopped.stdout == (f"Stopped the lab console (pid {console_pid}).\n"
                              f"Stopped the lab console's terminal agent (pid {agent_pid}).\n"
                              f"Stopped the site (pid {pid}).\nStopped the grading node.\n")
    assert not answers(url)
    assert not any(alive(p) for p in (pid, console_pid, agent_pid))
    assert not (lab.tmp / "var" / "grading-node.json").exists()
    assert not (lab.tmp / "var" / "grading-node").exists()
    assert (workstation / "handler.py").read_text() == "# my edits\n"

    restarted = local(lab, "start")
    assert restarted.returncode == 0 and answers(url)
    assert (workstation / "handler.py").read_text() == "# my edits\n"


@pytest.mark.skipif(not os.path.exists("/usr/lib/rabbitmq/bin/rabbitmq-server"),
                    reason="rabbitmq-server is not installed")
def test_make_local_starts_a_private_node_when_no_broker_answers(local_lab):
    lab = local_lab
    port = node_port()
    node = f"nightjar-test-{port}@localhost"
    management = free_port()
    result = local(lab, "start", NIGHTJAR_AMQP_URL="amqp://guest:guest@127.0.0.1:1/%2F",
                   NIGHTJAR_LOCAL_BROKER_PORT=str(port), NIGHTJAR_LOCAL_NODE=node,
                   NIGHTJAR_LOCAL_MANAGEMENT_PORT=str(management))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"RabbitMQ: amqp://guest:***@127.0.0.1:{port}/%2F (private node started by make local)\n" in result.stdout
    assert (f"RabbitMQ management UI: http://127.0.0.1:{management}/ (user guest, password guest)\n"
            in result.stdout)
    # The console's link to it answers.
    token = (lab.tmp / "var" / "console" / "token").read_text().strip()
    assert f'id="management-link" href="http://127.0.0.1:{management}/"' in console_page(lab, token)
    assert Console.answers(f"http://127.0.0.1:{management}/")
    env_file = (lab.tmp / "var" / "local.env").read_text()
    assert f"export NIGHTJAR_AMQP_URL=amqp://guest:guest@127.0.0.1:{port}/%2F\n" in env_file
    assert f"export NIGHTJAR_MANAGEMENT_URL=http://127.0.0.1:{management}/\n" in env_file

    # What unit 2 shows: a paused worker holds one unacknowledged delivery; after Ctrl+C it is ready.
    lab.amqp_url = f"amqp://guest:guest@127.0.0.1:{port}/%2F"
    lab.extra_env["NIGHTJAR_MANAGEMENT_URL"] = f"http://127.0.0.1:{management}/"
    queue_line = "Queue {q}: {} ready, {} unacknowledged{}, 0 dead-lettered (in {q}.dead)"
    statistics = " (RabbitMQ's statistics, which can be several seconds old)"
    lab.use_handler("unit2")  # acknowledges after the commit
    lab.register("Watched guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.", timeout=20)
    # At once from the delivery history; RabbitMQ's own count a little later.
    assert queue_line.format(0, 1, "", q=lab.queue) in lab.run("desk.py", "status").stdout.splitlines()
    assert status_settles(lab, queue_line.format(0, 1, statistics, q=lab.queue))
    assert worker.interrupt() == 130
    assert lab.run("desk.py", "status").stdout.splitlines()[-1] == queue_line.format(1, 0, "", q=lab.queue)
    assert status_settles(lab, queue_line.format(1, 0, statistics, q=lab.queue))

    stopped = local(lab, "stop")
    assert f"Stopped the private RabbitMQ node {node}.\n" in stopped.stdout
    ping = subprocess.run(["/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", node, "status"],
                          capture_output=True, text=True)
    assert ping.returncode != 0
