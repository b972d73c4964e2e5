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

This file is the command line; the work is in units/, one job a module: table
(the units and lessons), setup, check with trials (the handler in a throwaway
lab), solve, and database and backups, which setup and solve use.
"""

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from units.common import ROOT, Stop, say  # units/: the lab units' parts, one job a module (puts ROOT on sys.path)
from units.table import Unit, find, list_units
from nightjar.compose import lab_runs  # standard library only, as units.common and units.table

# The make target that runs each unit script, on whichever lab runs.
MAKE_TARGETS = {"setup": "unit", "check": "check-unit", "solve": "solve-unit"}


def beside_containers(argv):
    """One line when this asks a unit script for the local lab while `make up` runs the lab in containers.

    A unit folder's ./setup, ./check or ./solve (and labunits.py run by hand)
    act on the lab of the machine they run on; make knows which lab runs.
    """
    script = Path(argv[0])
    if script.name in MAKE_TARGETS:  # a unit folder's script
        action, name = script.name, script.resolve().parent.name
    elif len(argv) == 3 and argv[1] in MAKE_TARGETS:  # labunits.py ACTION N
        action, name = argv[1], argv[2]
    else:
        return None
    try:
        unit = find(name)
    except Stop:
        return None  # the command line says so itself
    if not isinstance(unit, Unit) or not lab_runs():  # a companion lesson touches no lab
        return None
    return (f"The lab runs in containers (make up), and this would act on the local lab:"
            f" run make {MAKE_TARGETS[action]} N={unit.number} in the repository instead.")


_refusal = beside_containers(sys.argv)
if _refusal:
    say(_refusal)
    sys.exit(2)  # ./check's "could not check" (units/check.py's COULD_NOT)
try:
    import pika  # noqa: F401  (the lab's one dependency)
except ImportError:
    sys.exit(f"{sys.executable} has no pika: use the lab's Python (make unit N=..., or"
             f" source {ROOT / '.venv' / 'bin' / 'activate'} first; make venv creates it).")
from nightjar import broker  # noqa: E402
from nightjar.config import local_var_folder  # noqa: E402
import guidetext  # noqa: E402  (scenarios/guidetext.py: the guide, in the learner's language)
from units.check import COULD_NOT, NOT_DONE, check  # noqa: E402
from units.setup import ready, setup  # noqa: E402
from units.solve import solve  # noqa: E402


def load_local_env():
    """Fill NIGHTJAR_* that are not set from what `make local` saved (var/local.env)."""
    env_file = local_var_folder() / "local.env"
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
