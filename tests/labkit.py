"""Helpers the tests share: a throwaway lab in the test's folder, finding left-over processes,
and what a program prints on a terminal."""

import fcntl
import os
import pty
import shutil
import struct
import termios
import threading
from pathlib import Path

from nightjar.harness import lab

ROOT = Path(__file__).resolve().parents[1]
TICKET_DESK = ROOT / "ticket-desk"
# Nothing listens there: desk.py status prints the same lines on every machine,
# whether or not the machine's RabbitMQ has its management plugin.
NO_MANAGEMENT_URL = "http://127.0.0.1:9/"
NO_MANAGEMENT_LINE = (f"Unacknowledged deliveries: the RabbitMQ management API does not answer at"
                      f" {NO_MANAGEMENT_URL}; set NIGHTJAR_MANAGEMENT_URL, or run rabbitmqctl"
                      " list_queues name messages_unacknowledged on the broker's machine.")
MACHINE_BROKER = "amqp://guest:guest@127.0.0.1:5672/%2F"
HANDLERS = {
    "starting": TICKET_DESK / "handler.py",
    "unit2": ROOT / "scenarios" / "unit2-ack-after-commit" / "solution" / "handler.py",
    "unit3": ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py",
}


class Lab(lab.Lab):
    """One test's throwaway lab (nightjar/harness/lab.py) in the test's folder: own queue, own
    database, a Workstation folder with the starting handler.py, on the machine's RabbitMQ."""

    def __init__(self, tmp, amqp_url=MACHINE_BROKER, workstation=None, queue_prefix="test"):
        super().__init__(amqp_url, folder=tmp, workstation=workstation, queue_prefix=queue_prefix,
                         extra_env={"NIGHTJAR_MANAGEMENT_URL": NO_MANAGEMENT_URL})
        self.tmp = tmp

    def use_handler(self, name_or_path):
        source = HANDLERS.get(name_or_path, name_or_path)
        shutil.copyfile(source, self.workstation / "handler.py")


def ticket_rows(tickets):
    """Tickets as (number, registration ID, name), the way the tests compare them."""
    return [(ticket.number, ticket.registration_id, ticket.name) for ticket in tickets]


def _live_processes(read):
    """PIDs of live (non-zombie) processes for which read(/proc/PID) is true."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if not read(entry):
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        found.append(int(entry.name))
    return found


def processes_mentioning(*texts):
    """PIDs of live (non-zombie) processes whose command line contains every text."""
    def mentions(entry):
        cmdline = (entry / "cmdline").read_bytes()
        return all(text.encode() in cmdline for text in texts)
    return _live_processes(mentions)


def processes_in_control_groups(*texts):
    """PIDs of live (non-zombie) processes whose control groups (/proc/PID/cgroup) contain every text."""
    def within(entry):
        groups = (entry / "cgroup").read_text()
        return all(text in groups for text in texts)
    return _live_processes(within)


def on_a_terminal(write, columns=80, rows=30):
    """What write(fd) printed to a terminal of columns x rows (a pty), with \\r\\n as \\n."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    chunks = []
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: _read(leader), b"")))
    reader.start()
    try:
        write(follower)
    finally:
        os.close(follower)
        reader.join(timeout=10)
        os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def _read(fd):
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal's other end closed: all read
        return b""
