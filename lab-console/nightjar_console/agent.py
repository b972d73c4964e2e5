"""The Workstation's side of the lab console: bash on a real PTY, and the unit scripts.

    python3 -m nightjar_console.agent --socket PATH [--folder DIR]

It runs inside the Workstation (compose.yaml's `workstation` service runs it
as its main process; `make local` runs it beside the local lab), as the
learner's user, with the Workstation's environment. It listens on a Unix
socket in a folder only the console shares (mode 0600), and speaks JSON
lines. The first line a client sends says what it wants:

  {"terminal": {"rows": 24, "cols": 80}}
      The shell: bash in the Workstation folder. Answered with
      ["attached", "same"] (a shell that already ran, with what it showed
      lately) or ["attached", "new"], then ["stdout", TEXT] as bash writes.
      The client sends ["stdin", TEXT] and ["size", ROWS, COLS]; Ctrl+C is
      the byte 0x03 on stdin, which the PTY turns into SIGINT for the
      foreground program, as on any terminal. ["ended", STATUS] when bash
      exits; the next client starts a new one. Every client attached at the
      same time sees the same shell.
  {"run": "setup" | "check" | "solve", "unit": "2", "lang": "en"}
      The unit's own scripts (make unit / the unit's ./check / make solve-unit), answered with
      ["out", TEXT] lines and then ["exit", STATUS].

Standard library only: the Workstation image has no web framework.
"""

import argparse
import codecs
import fcntl
import json
import os
import pty
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

SCROLLBACK = 64 * 1024    # characters of recent output a reattached page shows again
MESSAGE_LIMIT = 64 * 1024  # bytes in one JSON line from a client
SEND_TIMEOUT = 10          # seconds a client may keep the shell's output waiting
SCENARIOS = Path(os.environ.get("NIGHTJAR_SCENARIOS") or Path(__file__).resolve().parents[2] / "scenarios")
# What a unit's setup tells the learner to open for the Workstation: this page's terminal.
OPEN_WORKSTATION = {"en": "the terminal on this page", "ja": "このページの端末"}


def set_size(fd, rows, cols):
    """The terminal's size; the kernel tells the foreground program (SIGWINCH)."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def valid_size(rows, cols):
    return all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 1000 for n in (rows, cols))


class Shell:
    """bash on a PTY in the Workstation folder, and the clients that see it."""

    def __init__(self, folder, rows, cols):
        env = dict(os.environ, TERM="xterm-256color", COLORTERM="truecolor")
        env.pop("NIGHTJAR_CONSOLE_SOCKET", None)
        command = ["bash", "-i"]
        if env.get("VIRTUAL_ENV"):
            # make local's lab runs in a virtual environment: the shell activates it after the
            # learner's own ~/.bashrc, which may put another python3 first (as the guide's
            # `source .venv/bin/activate` would).
            command = ["bash", "--rcfile", str(Path(__file__).with_name("activate.bashrc")), "-i"]
        pid, fd = pty.fork()  # the child leads a session of its own, the PTY its terminal
        if pid == 0:
            try:
                os.chdir(folder)
                os.execvpe("bash", command, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        set_size(fd, rows, cols)
        self.lock = threading.Lock()
        self.clients = []
        self.recent = ""
        self.status = None  # bash's exit status once it has ended
        threading.Thread(target=self._pump, daemon=True).start()

    @property
    def alive(self):
        return self.status is None

    def attach(self, client):
        """Add a client; it first gets what the shell showed lately."""
        with self.lock:
            self.clients.append(client)
            if self.recent:
                client.send(["stdout", self.recent])

    def detach(self, client):
        with self.lock:
            if client in self.clients:
                self.clients.remove(client)

    def write(self, text):
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(self.fd, data):]

    def resize(self, rows, cols):
        set_size(self.fd, rows, cols)

    def _broadcast(self, message):
        for client in list(self.clients):
            if not client.send(message):
                self.clients.remove(client)

    def _pump(self):
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: bash and everything on its terminal have gone
                data = b""
            if not data:
                break
            text = decoder.decode(data)
            if text:
                with self.lock:
                    self.recent = (self.recent + text)[-SCROLLBACK:]
                    self._broadcast(["stdout", text])
        _pid, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        with self.lock:
            self.status = os.waitstatus_to_exitcode(status)
            self._broadcast(["ended", self.status])

    def hang_up(self):
        """As a terminal closing: bash ends, and so do the jobs it started."""
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGHUP)
            except ProcessLookupError:
                pass


class Client:
    """One connection to the agent: JSON lines in, JSON lines out."""

    def __init__(self, connection):
        self.connection = connection
        # A client that stops reading holds up the shell's output for SEND_TIMEOUT at most.
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_TIMEOUT, 0))
        self.reader = connection.makefile("rb")
        self.send_lock = threading.Lock()

    def send(self, message):
        """False once the client has gone (or stopped reading for SEND_TIMEOUT)."""
        line = (json.dumps(message, ensure_ascii=False) + "\n").encode()
        try:
            with self.send_lock:
                self.connection.sendall(line)
            return True
        except OSError:
            return False

    def receive(self):
        """The next message, or None when the client has gone or sent something unreadable."""
        try:
            line = self.reader.readline(MESSAGE_LIMIT + 1)
        except OSError:
            return None
        if not line or len(line) > MESSAGE_LIMIT:
            return None
        try:
            return json.loads(line)
        except ValueError:
            return None


class Agent:
    def __init__(self, folder):
        self.folder = folder
        self.shell = None
        self.lock = threading.Lock()

    def serve(self, client):
        try:
            request = client.receive()
            if isinstance(request, dict) and isinstance(request.get("terminal"), dict):
                self.terminal(client, request["terminal"])
            elif isinstance(request, dict) and "run" in request:
                self.run(client, request)
            else:
                client.send(["error", "the first line must ask for the terminal or a unit script"])
        finally:
            client.connection.close()

    def terminal(self, client, size):
        rows, cols = size.get("rows", 24), size.get("cols", 80)
        if not valid_size(rows, cols):
            client.send(["error", "rows and cols must be whole numbers from 1 to 1000"])
            return
        with self.lock:
            again = self.shell is not None and self.shell.alive
            if not again:
                self.shell = Shell(self.folder, rows, cols)
            shell = self.shell
        if not client.send(["attached", "same" if again else "new"]):
            return
        shell.attach(client)
        try:
            while (message := client.receive()) is not None:
                if not (isinstance(message, list) and message):
                    continue
                kind = message[0]
                if kind == "stdin" and len(message) == 2 and isinstance(message[1], str) and shell.alive:
                    shell.write(message[1])
                elif kind == "size" and len(message) == 3 and valid_size(*message[1:]) and shell.alive:
                    shell.resize(message[1], message[2])
        finally:
            shell.detach(client)

    def run(self, client, request):
        command = unit_command(request.get("run"), request.get("unit"))
        lang = request.get("lang") if request.get("lang") in OPEN_WORKSTATION else "en"
        if command is None:
            client.send(["error", "unknown unit script"])
            return
        # The guide is on the console's page already; setup prints only its own lines.
        env = dict(os.environ, NIGHTJAR_LANG=lang, NIGHTJAR_GUIDE="off",
                   NIGHTJAR_OPEN_WORKSTATION=OPEN_WORKSTATION[lang], PYTHONUNBUFFERED="1")
        env.pop("NIGHTJAR_CONSOLE_SOCKET", None)
        script = subprocess.Popen(command, cwd=self.folder, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            for line in script.stdout:
                if not client.send(["out", line.decode("utf-8", "replace").rstrip("\n")]):
                    break
        finally:
            script.stdout.close()
            status = script.wait()
        client.send(["exit", status])

    def hang_up(self):
        with self.lock:
            if self.shell is not None:
                self.shell.hang_up()


def unit_command(action, unit):
    """The command for a unit script, or None: only the lab's own units and lessons."""
    if action not in ("setup", "check", "solve") or not isinstance(unit, str):
        return None
    sys.path.insert(0, str(SCENARIOS))
    from units.common import Stop  # scenarios/units: the lab's table of units (standard library)
    from units.table import Unit, find
    try:
        found = find(unit)
    except Stop:
        return None
    folder = found.path if isinstance(found, Unit) else found
    if action == "solve":
        # `make solve-unit N=...`: the unit's steps done for real; a lesson has none here
        return [sys.executable, str(SCENARIOS / "labunits.py"), "solve", unit] if isinstance(found, Unit) else None
    if action == "setup":
        # `make unit N=...`: the setup and, for a lesson, its own lines
        return [sys.executable, str(SCENARIOS / "labunits.py"), "setup", unit]
    return [sys.executable, str(folder / "check")]  # the unit's ./check: 0 done, 1 not yet, 2 could not


def listen(path):
    path = Path(path)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # left by an agent that was killed
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)  # the socket is born 0600: the console's user only
    try:
        server.bind(str(path))
    finally:
        os.umask(old_mask)
    server.listen(16)
    return server


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m nightjar_console.agent",
                                     description="The lab console's terminal and unit scripts,"
                                                 " inside the Workstation.")
    parser.add_argument("--socket", default=os.environ.get("NIGHTJAR_CONSOLE_SOCKET"),
                        help="the Unix socket to listen on (default NIGHTJAR_CONSOLE_SOCKET)")
    parser.add_argument("--folder", type=Path, default=Path.cwd(),
                        help="where the shell starts (default: the current folder)")
    options = parser.parse_args(argv)
    if not options.socket:
        parser.error("say where to listen: --socket PATH or NIGHTJAR_CONSOLE_SOCKET")
    agent = Agent(options.folder)
    server = listen(options.socket)

    def stop(_signum, _frame):
        agent.hang_up()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"The lab console's terminal agent listens on {options.socket}", flush=True)
    while True:
        connection, _address = server.accept()
        threading.Thread(target=agent.serve, args=(Client(connection),), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
