"""RabbitMQ itself stops (`rabbitmqctl stop`) in the middle of `worker.py --drain`.

The test runs a RabbitMQ node of its own (own node name, ports and data
directory), stops it for real and starts it again on the same data; the
machine's broker is never touched.
"""

import os
import shutil
import signal
import subprocess
import time
import uuid

import pika
import pika.exceptions
import pytest

from labkit import Lab, ticket_rows
from nightjar.harness.rabbitnode import find_tool, free_port, node_environment

pytestmark = pytest.mark.skipif(find_tool("rabbitmq-server") is None,
                                reason="rabbitmq-server is not installed")


class StoppableNode:
    """A private node that can be stopped with rabbitmqctl and started again on its data."""

    def __init__(self, directory):
        self.dir = directory
        self.name = f"nightjar-test-{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.env = node_environment(directory, self.name, self.port, free_port())
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"
        self.process = None

    def start(self, timeout=60):
        with open(self.dir / "server.out", "ab") as log:
            # Its own session: the node is one process group, out of reach of Ctrl+C.
            self.process = subprocess.Popen(
                [find_tool("rabbitmq-server")], env=self.env, cwd=self.dir,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            assert self.process.poll() is None, (self.dir / "server.out").read_text()[-2000:]
            try:
                pika.BlockingConnection(pika.URLParameters(self.url)).close()
                return
            except (pika.exceptions.AMQPError, OSError):
                assert time.monotonic() < deadline, "the test's RabbitMQ node did not start"
                time.sleep(0.1)

    def stop(self):
        """`rabbitmqctl stop`, as an operator would; returns once the node has exited."""
        subprocess.run([find_tool("rabbitmqctl"), "-n", self.name, "stop",
                        self.env["RABBITMQ_PID_FILE"]],
                       env=self.env, cwd=self.dir, capture_output=True, timeout=60, check=True)
        self.process.wait(timeout=30)

    def remove(self):
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def node(tmp_path):
    node = StoppableNode(tmp_path / "node")
    node.start()
    yield node
    node.remove()


def test_rabbitmq_stopping_mid_drain_is_one_line_and_loses_nothing(tmp_path, node):
    lab = Lab(tmp_path, amqp_url=node.url)
    lab.use_handler("unit3")
    guests = ["First guest", "Second guest", "Third guest"]
    ids = [lab.register(name) for name in guests]

    # Paused after the first ticket is committed, before its ack: RabbitMQ stops now.
    worker = lab.start("worker.py", "--drain", "--pause", "after-commit")
    worker.wait_for("Paused after-commit.")
    node.stop()
    assert worker.finish() == 1
    assert worker.lines == [f"Received {ids[0]} redelivered=False", "Paused after-commit."]
    assert worker.stderr == (
        "The connection to RabbitMQ was lost (RabbitMQ closed it: CONNECTION_FORCED - broker"
        " forced connection closure with reason 'shutdown'). Nothing is lost: RabbitMQ keeps any"
        " delivery this worker had not acknowledged and will deliver it again; run the worker"
        " again once RabbitMQ is back.\n")

    node.start()
    result = lab.run("worker.py", "--drain")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines() == [
        f"Received {ids[0]} redelivered=True", "Handler returned.",
        f"Received {ids[1]} redelivered=False", "Handler returned.",
        f"Received {ids[2]} redelivered=False", "Handler returned.",
        "No ready registrations",
    ]
    assert [(rid, name) for _number, rid, name in ticket_rows(lab.tickets())] == [
        ("R-0001", "Mina Patel"), *zip(ids, guests)]
    assert all(lab.completed(rid) for rid in ids)
    assert lab.depth() == (0, 0)
