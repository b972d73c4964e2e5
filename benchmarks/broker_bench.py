#!/usr/bin/env python3
"""Measure what a grading's parts cost RabbitMQ: the CPU of the grading node's beam process.

    .venv/bin/python benchmarks/broker_bench.py [--rounds N] [--queues N] [--connections N]

On a grading node of its own (as `make local` keeps), each round times, as
the beam process's CPU before and after (from /proc):
- a submission's vhost and user, made and deleted through the management
  API (what each sandboxed grading does once);
- --queues labs' two quorum queues (the lab's own arguments), declared and
  deleted (a grading makes one lab a check's variant: 13);
- --connections AMQP connections opened, a channel, closed
  (a grading's worker runs and the grader's own looks at the queues);
- the same queues as classic queues, for comparison only: the lab's queues
  are quorum queues, and the grading must behave as the lab does.
Prints the median CPU-seconds of each part.
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pika

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_bench import beam_pid, process_cpu  # noqa: E402
from nightjar import broker  # noqa: E402
from nightjar.config import Settings  # noqa: E402
from nightjar.harness import gradingnode  # noqa: E402
from nightjar import rabbitadmin  # noqa: E402


def measured(beam, work):
    before = process_cpu(beam)
    work()
    time.sleep(0.3)  # what the node does right after (a deleted queue's Ra server stopping)
    return process_cpu(beam) - before


def queues(url, count, kind):
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    names = [f"nightjar.bench.{kind}.{i}" for i in range(count)]
    for name in names:
        settings = Settings(url, "", name)
        if kind == "quorum":
            broker.declare_queues(channel, settings)
        else:
            channel.queue_declare(settings.dead_letter_queue, durable=True)
            channel.queue_declare(name, durable=True)
    for name in names:
        channel.queue_delete(name)
        channel.queue_delete(Settings(url, "", name).dead_letter_queue)
    connection.close()


def connections(url, count):
    for _ in range(count):
        connection = pika.BlockingConnection(pika.URLParameters(url))
        connection.channel()
        connection.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--queues", type=int, default=13)
    parser.add_argument("--connections", type=int, default=30)
    args = parser.parse_args()
    var = Path(tempfile.mkdtemp(prefix="nightjar-bench-var-"))
    parts = {}
    try:
        if gradingnode.start(var) is None or gradingnode.find(var, wait=60) is None:
            sys.exit("the grading node did not start (is RabbitMQ installed?)")
        url, management_url = gradingnode.find(var)
        beam = beam_pid(var)
        admin = rabbitadmin.Admin(management_url, url)
        time.sleep(2)  # the node's own start-up work
        for _ in range(args.rounds):
            for name, work in (
                    ("vhost and user, made and deleted", lambda: admin.delete_tenant(
                        admin.create_tenant("nightjar-bench"))),
                    (f"{args.queues} labs' quorum queues", lambda: queues(url, args.queues, "quorum")),
                    (f"{args.queues} labs' classic queues", lambda: queues(url, args.queues, "classic")),
                    (f"{args.connections} connections", lambda: connections(url, args.connections)),
                    ("idle, 1 s", lambda: time.sleep(0.7))):
                parts.setdefault(name, []).append(measured(beam, work))
        for name, values in parts.items():
            print(f"{name}: median {statistics.median(values):5.3f} CPU-s"
                  f" ({min(values):.3f}-{max(values):.3f})")
    finally:
        gradingnode.stop(var)
        shutil.rmtree(var, ignore_errors=True)


if __name__ == "__main__":
    main()
