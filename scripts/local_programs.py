"""make local's background programs: the site, the lab console and the console's agent.

Each runs as `python -m MODULE`, in a session of its own, its output in
var/NAME.log and its pid in var/NAME.pid and var/local.json. `make local`
keeps one that already runs with the same settings (started again when they
changed), and `make stop` stops it (SIGTERM, then SIGKILL after 10 s). A pid
counts only while its command line still names the module: a pid the system
has given to another program since is never killed.
"""

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from local_state import VAR, port_open, save_state, say

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Program:
    key: str     # its entry in var/local.json, and its files' names
    module: str  # python -m MODULE
    title: str   # in the lines it is named by, e.g. "the site"

    @property
    def pid_file(self):
        return VAR / f"{self.key}.pid"

    @property
    def log(self):
        return VAR / f"{self.key}.log"

    def runs(self, pid):
        """True when pid is alive and is this program (not a recycled pid of something else)."""
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return self.module.encode() in cmdline

    def start(self, state, *, args=(), env, cwd=ROOT, settings, port=None, port_setting="", ready):
        """Started in the background (or the one make local started, kept); its pid.

        settings: what it was started with (another value starts it again);
        port: the (host, port) it will listen on, refused when another program holds it;
        ready(): True once it answers (it must within 30 s, or make local stops)."""
        previous = state.get(self.key) or {}
        if previous.get("pid") and self.runs(previous["pid"]):
            if previous.get("settings") == settings:
                say(f"{self.title[0].upper()}{self.title[1:]} is already running (pid {previous['pid']}).")
                return previous["pid"]
            self.stop_pid(previous["pid"])
        if port and port_open(*port):
            say(f"Port {port[1]} is already in use by another program; stop it or choose another port"
                f" with {port_setting}.")
            sys.exit(1)
        with open(self.log, "ab") as log:
            process = subprocess.Popen([sys.executable, "-m", self.module, *args], cwd=cwd, env=env,
                                       stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        self.pid_file.write_text(f"{process.pid}\n")
        state[self.key] = {"pid": process.pid, "settings": settings}
        save_state(state)
        self.wait(process, ready)
        say(f"Started {self.title} (pid {process.pid}; log {self.log}).")
        return process.pid

    def wait(self, process, ready, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                say(f"{self.title[0].upper()}{self.title[1:]} stopped at once (exit status"
                    f" {process.returncode}). The end of {self.log}:")
                say("\n".join(self.log.read_text(errors="replace").splitlines()[-15:]))
                sys.exit(1)
            if ready():
                return
            time.sleep(0.1)
        say(f"{self.title[0].upper()}{self.title[1:]} did not answer within {timeout} s; see {self.log}.")
        sys.exit(1)

    def stop(self, state):
        """make stop: stop it if make local started it, saying so."""
        pid = (state.get(self.key) or {}).get("pid")
        if pid is None and self.pid_file.exists():
            pid = int(self.pid_file.read_text().strip() or 0) or None
        if pid:
            self.stop_pid(pid)
        else:
            say(f"{self.title[0].upper()}{self.title[1:]} was not started by make local.")
        self.pid_file.unlink(missing_ok=True)

    def stop_pid(self, pid):
        if not self.runs(pid):
            say(f"{self.title[0].upper()}{self.title[1:]} was not running.")
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not self.runs(pid):
                break
            time.sleep(0.1)
        else:
            os.kill(pid, signal.SIGKILL)
        say(f"Stopped {self.title} (pid {pid}).")


SITE = Program("site", "nightjar_site", "the site")
AGENT = Program("console-agent", "nightjar_console.agent", "the lab console's terminal agent")
CONSOLE = Program("console", "nightjar_console", "the lab console")
