"""./solve: a unit's steps done for real on the live lab, as a learner would, each one printed."""

import shlex

from nightjar import broker, db as database, queueing, registrations
from nightjar.config import Settings, workstation_folder
from nightjar.harness import interruptions, processes
from nightjar.harness.lab import wait_until

from .backups import backup
from .common import BACKUPS, UNIT2_HANDLER, UNIT3_HANDLER, Stop, say


class Desk:
    """The learner's two windows: the Nightjar site (its code path) and the Workstation terminal."""

    def __init__(self, unit):
        self.settings = Settings.from_env()
        self.folder = workstation_folder()
        self.env = processes.program_env(self.settings)
        if not (self.folder / "worker.py").is_file():
            raise Stop(f"no Workstation folder at {self.folder}: run make unit N={unit.number} first")

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

    # How long the worker may take to reach a checkpoint (interruptions.ctrl_c_at).
    worker_timeout = 30

    def start(self, program, *args, **_options):
        """Start a Workstation program, for the harness's ctrl_c_at."""
        return processes.start(self.folder, self.env, program, *args)

    def ctrl_c_at(self, point, expect_received, at_pause=None, returns=True):
        """python3 worker.py --pause POINT, then Ctrl+C at `Paused POINT.` (at_pause() runs first).

        returns: the delivery comes back to the queue (False: it was acknowledged already).
        """
        self.shell(f"python3 worker.py --pause {point}")
        waiting = {}

        def paused(worker):
            for line in worker.lines:
                say(line)
            if worker.lines != [expect_received, f"Paused {point}."]:
                raise Stop(f"expected {expect_received!r} first")
            if at_pause:
                at_pause()
            waiting["ready"] = self.ready()
            say("^C")

        worker = interruptions.ctrl_c_at(self, point, on_pause=paused)
        if not worker.paused:
            for line in worker.lines + worker.stderr.splitlines():
                say(line)
            raise Stop(f"the worker never paused at {point}")
        # Wait a moment until RabbitMQ has the unacknowledged delivery back.
        if returns:
            wait_until(lambda: self.ready() > waiting["ready"], 1.5, interval=0.05)
        for line in worker.lines[2:] + worker.stderr.splitlines():
            say(line)
        self.shell("echo $?")
        say(str(worker.returncode))
        if worker.returncode != 130:
            raise Stop(f"the interrupted worker exited with {worker.returncode}, not 130")

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
    # The lost job: acknowledged before its ticket, interrupted, never delivered again.
    lost = desk.register("Lost guest")
    desk.ctrl_c_at("before-write", f"Received {lost} redelivered=False", returns=False)
    desk.run("worker.py", expect="No ready registrations\n")
    desk.run("desk.py", "history", lost)
    desk.look(lost, tickets=0)
    desk.run("desk.py", "retry", lost, expect=f"Queued a new delivery of {lost} (Lost guest).\n")
    desk.run("worker.py", expect=f"Received {lost} redelivered=False\nHandler returned.\n")
    desk.look(lost, tickets=1)


def solve_unit2(desk):
    desk.replace_handler(UNIT2_HANDLER)
    registration_id = desk.register("Retry guest")
    desk.ctrl_c_at("before-write", f"Received {registration_id} redelivered=False")
    desk.look(registration_id, tickets=0)
    desk.run("worker.py", expect=f"Received {registration_id} redelivered=True\nHandler returned.\n")
    desk.look(registration_id, tickets=1)
    desk.run("desk.py", "history", registration_id)


def solve_unit3(desk):
    # The second window, seen first with unit 2's handler: two deliveries, two tickets.
    desk.run("desk.py", "retry", "R-0002", expect="Queued a new delivery of R-0002 (Normal guest).\n")
    desk.ctrl_c_at("after-commit", "Received R-0002 redelivered=False")
    desk.run("worker.py", expect="Received R-0002 redelivered=True\nHandler returned.\n")
    desk.run("desk.py", "history", "R-0002")
    desk.look("R-0002", tickets=3)
    desk.replace_handler(UNIT3_HANDLER)
    first = desk.register("Same name")
    second = desk.register("Same name")
    desk.ctrl_c_at("inside-transaction", f"Received {first} redelivered=False")
    desk.look(first, tickets=0, completed=False)
    desk.run("desk.py", "status")
    desk.ctrl_c_at("after-commit", f"Received {first} redelivered=True",
                   at_pause=lambda: desk.look(first, tickets=1, completed=True))
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
    # The repair of the duplicates the old handler wrote.
    desk.run("desk.py", "repair", "R-0002")
    desk.run("desk.py", "repair", "R-0002", "--apply")
    desk.look("R-0002", tickets=1, completed=True)


SOLVERS = {1: solve_unit1, 2: solve_unit2, 3: solve_unit3}


def solve(unit):
    say(f"Solving {unit.title}, step by step, on the live lab")
    SOLVERS[unit.number](Desk(unit))
    say(f"Solved. Now: make check-unit N={unit.number}")
    return 0
