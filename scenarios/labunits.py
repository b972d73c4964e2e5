"""The three units of the Nightjar lab: setup, check and solve on the live lab.

Each unit folder (unit1-trace-registration, unit2-ack-after-commit,
unit3-idempotent-results) has three small scripts that call main() here:

    ./setup   bring the live lab to the unit's start, on its own (then show the
              guide, see guidetext.py): the database
              at NIGHTJAR_DB, the queue NIGHTJAR_QUEUE, and the learner's
              Workstation folder (NIGHTJAR_WORKSTATION, default
              workstation/ticket-desk). The learner's handler.py and the
              database are copied to <Workstation>/.backups/ first.
    ./check   read the real results and print what is still missing, one line
              each; exit 0 when the unit is done, 1 when not yet, 2 when it
              could not check. The handler is tried in a throwaway lab (its own
              database and queue on the same broker). `labunits.py check N`
              (make check-unit) answers "not done yet" with exit 0 instead.
    ./solve   do the unit's steps for real, as a learner would, printing each.

Run from the repository:  python3 scenarios/labunits.py list | setup N | check N | solve N
(`make unit N=2`, `make units`, `make check-unit N=2`, `make solve-unit N=2`).
"""

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from units.common import ROOT  # units/: the lab units' parts, one job a module (puts ROOT on sys.path)

try:
    import pika  # noqa: F401  (the lab's one dependency)
except ImportError:
    sys.exit(f"{sys.executable} has no pika: use the lab's Python (make unit N=..., or"
             f" source {ROOT / '.venv' / 'bin' / 'activate'} first; make venv creates it).")
from nightjar import broker, db as database, queueing, registrations  # noqa: E402
from nightjar.harness import processes  # noqa: E402
import guidetext  # noqa: E402  (scenarios/guidetext.py: the guide, in the learner's language)
from nightjar.config import Settings, workstation_folder  # noqa: E402
from units.backups import backup  # noqa: E402
from units.check import COULD_NOT, NOT_DONE, check  # noqa: E402
from units.common import BACKUPS, UNIT2_HANDLER, UNIT3_HANDLER, Stop, say  # noqa: E402
from units.setup import ready, setup  # noqa: E402
from units.table import find, list_units  # noqa: E402


# ---------------------------------------------------------------- solve: the unit's steps, for real

class Desk:
    """The learner's two windows: the Nightjar site (its code path) and the Workstation terminal."""

    def __init__(self):
        self.settings = Settings.from_env()
        self.folder = workstation_folder()
        self.env = processes.program_env(self.settings)
        if not (self.folder / "worker.py").is_file():
            raise Stop(f"no Workstation folder at {self.folder}: run ./setup first")

    def _db(self):
        return database.connect(self.settings.db_path)

    # Nightjar
    def register(self, name):
        say(f"[Nightjar] The evening: Guest name = {name}, Register for the evening")
        registration_id, queued = queueing.register_at(self.settings.db_path, self.settings, name)
        if not queued:
            raise Stop(f"RabbitMQ did not take {registration_id}; is it running?")
        say(f"[Nightjar] {registration_id} {name}: Your ticket is being prepared")
        return registration_id

    def registration(self, registration_id):
        db = self._db()
        try:
            return registrations.get(db, registration_id)
        finally:
            db.close()

    def look(self, registration_id, tickets, completed=None):
        """Open the registration page; Stop unless it has this many tickets."""
        r = self.registration(registration_id)
        if not r.tickets:
            page = "Your ticket is being prepared"
        else:
            page = "; ".join(f"Open ticket {t.number} ({t.registration_id}, {t.name})"
                             for t in r.tickets)
        say(f"[Nightjar] {r.id} {r.name}: {page}")
        if len(r.tickets) != tickets:
            raise Stop(f"expected {tickets} ticket(s) for {r.id}, found {len(r.tickets)}")
        if completed is not None and r.completed != completed:
            raise Stop(f"expected {r.id} {'' if completed else 'not '}to be recorded as completed")
        return r

    # Workstation
    def shell(self, command):
        say(f"[Workstation] $ {command}")

    def run(self, *args, expect=None):
        """Run a program to the end, showing its output; Stop unless it exits 0 (and prints `expect`)."""
        self.shell(" ".join(["python3", *map(shlex.quote, args)]))
        result = processes.run(self.folder, self.env, *args, timeout=60)
        for line in result.stdout.splitlines() + result.stderr.splitlines():
            say(line)
        if result.returncode != 0:
            raise Stop(f"python3 {' '.join(args)} exited with status {result.returncode}")
        if expect is not None and result.stdout != expect:
            raise Stop(f"expected the output {expect!r}")
        return result

    def run_until_paused(self, point, expect_received):
        """python3 worker.py --pause POINT, then Ctrl+C at `Paused POINT.`; the exit status."""
        self.shell(f"python3 worker.py --pause {point}")
        worker = processes.start(self.folder, self.env, "worker.py", "--pause", point)
        try:
            worker.wait_for(f"Paused {point}.", timeout=30)
        except processes.NeverPrinted:
            worker.stop()
            for line in worker.lines + worker.stderr.splitlines():
                say(line)
            raise Stop(f"the worker never paused at {point}") from None
        for line in worker.lines:
            say(line)
        if worker.lines != [expect_received, f"Paused {point}."]:
            raise Stop(f"expected {expect_received!r} first")
        return worker

    def interrupt(self, worker):
        """Ctrl+C; then wait a moment until RabbitMQ has the unacknowledged delivery back."""
        waiting = self.ready()
        say("^C")
        status = worker.interrupt()
        deadline = time.monotonic() + 1.5
        while self.ready() <= waiting and time.monotonic() < deadline:
            time.sleep(0.05)
        for line in worker.lines[2:] + worker.stderr.splitlines():
            say(line)
        self.shell("echo $?")
        say(str(status))
        if status != 130:
            raise Stop(f"the interrupted worker exited with {status}, not 130")

    def ready(self):
        return broker.queue_depths(self.settings)[0]

    def replace_handler(self, solution):
        """cat > handler.py <<'PYTHON' ... PYTHON, with the solution's text."""
        text = solution.read_text(encoding="utf-8")
        handler = self.folder / "handler.py"
        if handler.exists() and handler.read_text(encoding="utf-8") != text:
            saved = backup(handler, self.folder / BACKUPS)
            say(f"(your handler.py is saved as {saved})")
        self.shell("cat > handler.py <<'PYTHON'")
        for line in text.splitlines():
            say(line)
        say("PYTHON")
        handler.write_text(text, encoding="utf-8")


def solve_unit1(desk):
    say("[Nightjar] Explore the evening -> Plan your visit -> The evening")
    registration_id = desk.register("Normal guest")
    desk.shell("pwd")
    say(str(desk.folder))
    desk.shell("cat handler.py")
    for line in (desk.folder / "handler.py").read_text(encoding="utf-8").splitlines():
        say(line)
    desk.run("worker.py", expect=f"Received {registration_id} redelivered=False\nHandler returned.\n")
    desk.look(registration_id, tickets=1)
    desk.look("R-0001", tickets=1)


def solve_unit2(desk):
    desk.replace_handler(UNIT2_HANDLER)
    registration_id = desk.register("Retry guest")
    worker = desk.run_until_paused("before-write", f"Received {registration_id} redelivered=False")
    desk.interrupt(worker)
    desk.look(registration_id, tickets=0)
    desk.run("worker.py", expect=f"Received {registration_id} redelivered=True\nHandler returned.\n")
    desk.look(registration_id, tickets=1)


def solve_unit3(desk):
    desk.replace_handler(UNIT3_HANDLER)
    first = desk.register("Same name")
    second = desk.register("Same name")
    worker = desk.run_until_paused("inside-transaction", f"Received {first} redelivered=False")
    desk.interrupt(worker)
    desk.look(first, tickets=0, completed=False)
    worker = desk.run_until_paused("after-commit", f"Received {first} redelivered=True")
    desk.look(first, tickets=1, completed=True)
    desk.interrupt(worker)
    desk.run("worker.py", expect=f"Received {first} redelivered=True\nHandler returned.\n")
    desk.look(first, tickets=1)
    desk.run("worker.py", "--drain", expect=f"Received {second} redelivered=False\nHandler returned.\n"
                                            "No ready registrations\n")
    desk.look(second, tickets=1)
    desk.run("desk.py", "status")
    desk.run("desk.py", "retry", first, expect=f"Queued a new delivery of {first} (Same name).\n")
    desk.run("worker.py", "--drain", expect=f"Received {first} redelivered=False\nHandler returned.\n"
                                            "No ready registrations\n")
    desk.look(first, tickets=1)
    desk.look(second, tickets=1)


SOLVERS = {1: solve_unit1, 2: solve_unit2, 3: solve_unit3}


def solve(unit):
    say(f"Solving {unit.title}, step by step, on the live lab")
    SOLVERS[unit.number](Desk())
    say(f"Solved. Now: python3 {(unit.path / 'check').relative_to(ROOT)}")
    return 0


def load_local_env():
    """Fill NIGHTJAR_* that are not set from what `make local` saved (var/local.env)."""
    env_file = Path(os.environ.get("NIGHTJAR_LOCAL_VAR") or ROOT / "var") / "local.env"
    try:
        text = env_file.read_text()
    except OSError:
        return
    applied = []
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            if name.startswith("NIGHTJAR_") and name not in os.environ:
                os.environ[name] = value
                applied.append(name)
    if applied:
        say(f"(Using {', '.join(applied)} from {env_file}, saved by make local.)")


def run_action(action, target):
    try:
        if isinstance(target, Path):  # a companion lesson: its own scripts
            lang = guidetext.language() if action == "setup" else None
            status = subprocess.call([sys.executable, str(target / action)])
            if lang and status == 0:
                ready(target, lang)
            return status
        return {"setup": setup, "check": check, "solve": solve}[action](target)
    except (Stop, broker.BrokerUnavailable, guidetext.BadLanguage) as error:
        say(f"{action} stopped: {error}")
        return COULD_NOT
    except KeyboardInterrupt:
        return 130


def main(action, script_path):
    """Entry point of a unit folder's scripts: main("check", __file__)."""
    sys.stdout.reconfigure(line_buffering=True)
    load_local_env()
    return run_action(action, find(Path(script_path).resolve().parent.name))


def cli(argv):
    sys.stdout.reconfigure(line_buffering=True)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `make units | head` ends quietly
    if not argv or argv[0] == "list":
        return list_units()
    if argv[0] not in ("setup", "check", "solve") or len(argv) != 2:
        say("usage: labunits.py list | setup N | check N | solve N   (N: 1, 2, 3, cl-13-2, cl-13-3)")
        return 2
    try:
        target = find(argv[1])
    except Stop as error:
        say(str(error))
        return 2
    load_local_env()
    status = run_action(argv[0], target)
    # `make check-unit`: "not done yet" is an answer, not a failure, so make adds no
    # "Error 1" line of its own. The unit's ./check keeps exit status 1 for scripts.
    return 0 if argv[0] == "check" and status == NOT_DONE else status


if __name__ == "__main__":
    sys.exit(cli(sys.argv[1:]))
