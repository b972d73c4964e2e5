"""The ticket desk: look at the real rows and fix things by hand.

    python3 desk.py status              registrations, tickets, problems, the queue
    python3 desk.py register NAME       register a guest (as the site's form does)
    python3 desk.py retry R-0003        ask RabbitMQ to deliver a registration again
    python3 desk.py repair R-0002       preview the repair of duplicate tickets
    python3 desk.py repair R-0002 --apply
    python3 desk.py history R-0003      what happened to each delivery of a registration
"""

import sys

import common

try:
    from nightjar.runtime.desk_commands import main
except ModuleNotFoundError as missing:
    sys.exit(common.not_activated(missing))  # one line saying what to run first

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
