"""What the learner sees in a terminal: Ctrl+C at a pause, a broken handler.py, no virtual environment."""

import fcntl
import os
import pty
import select
import shutil
import subprocess
import sys
import termios
import textwrap
import time

import pytest

from labkit import TICKET_DESK


def run_in_terminal(lab, *args, wait_for, keys):
    """Run worker.py on a pseudo-terminal, type `keys` once `wait_for` shows: (screen bytes, status).

    The terminal is the worker's controlling terminal, so typing Ctrl+C makes
    the terminal itself send SIGINT and echo ^C, exactly as for the learner.
    `keys` may be a list: each is typed a second after the one before.
    """
    keys = [keys] if isinstance(keys, bytes) else list(keys)
    controller, terminal = pty.openpty()

    def take_terminal():  # in the child, after setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    worker = subprocess.Popen(
        [sys.executable, "worker.py", *args], cwd=lab.workstation, env=lab.env,
        stdin=terminal, stdout=terminal, stderr=terminal,
        start_new_session=True, preexec_fn=take_terminal)
    os.close(terminal)
    screen = b""
    next_key = None  # when to type the next key, once wait_for shows
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            if next_key is None and wait_for in screen:
                next_key = time.monotonic()
            if keys and next_key is not None and time.monotonic() >= next_key:
                os.write(controller, keys.pop(0))
                next_key = time.monotonic() + 1
            if select.select([controller], [], [], 0.1)[0]:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:  # EIO: the worker has exited and closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
        return screen, worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        os.close(controller)


def test_ctrl_c_at_a_pause_leaves_the_prompt_on_a_fresh_line(lab):
    lab.use_handler("unit2")
    registration_id = lab.register("Calm guest")
    screen, status = run_in_terminal(lab, "--pause", "before-write",
                                     wait_for=b"Paused before-write.\r\n", keys=b"\x03")
    assert status == 130
    # ^C is the terminal's echo; the line break after it is the worker's.
    assert screen == (f"Received {registration_id} redelivered=False\r\n"
                      "Paused before-write.\r\n"
                      "^C\r\n").encode()
    assert lab.depth() == (1, 0)  # the unacknowledged delivery is back in the queue


def test_ctrl_d_at_a_pause_is_not_enter(lab):
    lab.use_handler("unit2")
    registration_id = lab.register("Calm guest")
    screen, status = run_in_terminal(lab, "--pause", "before-write",
                                     wait_for=b"Paused before-write.\r\n", keys=[b"\x04", b"\x03"])
    assert status == 130  # still paused after Ctrl+D: Ctrl+C stopped it
    assert screen == (f"Received {registration_id} redelivered=False\r\n"
                      "Paused before-write.\r\n"
                      "^C\r\n").encode()
    assert lab.depth() == (1, 0)


@pytest.mark.parametrize("source, kind, line", [
    ("def handle(ch, delivery, job, db, pause)\n    pass\n", "SyntaxError", 1),
    ("def handle(ch, delivery, job, db, pause):\nch.basic_ack(delivery.delivery_tag)\n",
     "IndentationError", 2),
    ("def handle(ch, delivery, job, db, pause):\n    with db:\n        pass\n"
     "      ch.basic_ack(delivery.delivery_tag)\n", "IndentationError", 4),
], ids=["missing-colon", "body-not-indented", "unindent-mismatch"])
def test_a_broken_handler_is_one_line_and_takes_no_message(lab, source, kind, line):
    (lab.workstation / "handler.py").write_text(source)
    lab.register("Syntax guest")
    result = lab.run("worker.py")
    try:  # Python's own wording of what is wrong
        compile(source, "handler.py", "exec")
    except SyntaxError as error:
        what = error.msg
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (f"handler.py could not be loaded: {kind} in handler.py, line {line}:"
                             f" {what}. Fix it and run the worker again.\n")
    assert lab.depth() == (1, 0)


def test_a_handler_failing_at_import_shows_its_own_lines_only(lab):
    (lab.workstation / "handler.py").write_text(textwrap.dedent("""\
        from common import chekpoint
        """))
    result = lab.run("worker.py")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "handler.py could not be loaded; fix it and run the worker again:",
        "Traceback (most recent call last):",
        f'  File "{lab.workstation / "handler.py"}", line 1, in <module>',
        "    from common import chekpoint",
        f"ImportError: cannot import name 'chekpoint' from 'common' ({lab.workstation / 'common.py'})",
    ]


def test_without_the_virtual_environment_the_programs_say_what_to_run(tmp_path):
    # The layout make local creates: the lab's .venv two folders above the Workstation.
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")
    folder = tmp_path / "workstation" / "ticket-desk"
    shutil.copytree(TICKET_DESK, folder, ignore=shutil.ignore_patterns("__pycache__"))
    # The interpreter this venv was made from: a python3 without the lab's packages.
    python3 = sys._base_executable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if subprocess.run([python3, "-c", "import nightjar"], env=env, cwd=tmp_path,
                      capture_output=True).returncode == 0:
        pytest.skip(f"{python3} has the lab's packages installed")
    for program, args in (("worker.py", ()), ("desk.py", ("status",))):
        result = subprocess.run([python3, program, *args], cwd=folder, env=env,
                                capture_output=True, text=True, timeout=30)
        assert (result.returncode, result.stdout, result.stderr) == (
            1, "", "This python3 does not have the lab's packages (No module named 'nightjar'):"
                   " run 'source ../../.venv/bin/activate' first, then try again.\n")
