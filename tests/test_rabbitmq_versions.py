"""What the lab says about RabbitMQ (docs/explanation/rabbitmq-versions.md), held on a real RabbitMQ
3.x, 4.0 and 4.3: the base images' stand-ins (tests/stackkit.py: Debian 12's 3.10, Debian 13's
4.0 and Debian unstable's 4.3), each in a container.

Each broker runs with a consumer timeout of 3 s (30 minutes by default), checked twice a second
(RabbitMQ 3.x and 4.0 check it on the channel's tick, every minute by default), so a pause can
outlast it in a test. The lab's own queues (nightjar/broker.py) and the real worker.py run on it,
and queues of the tests' own where a claim needs a smaller limit or another kind of queue.

Marked `containers`; skipped without a Docker engine unless NIGHTJAR_CONTAINER_TESTS=required.
"""

import re
import secrets
import time

import pika
import pika.exceptions
import pytest

from labkit import Lab, ticket_rows
from nightjar.broker import DELIVERY_LIMIT
from nightjar.harness.rabbitnode import free_port
from nightjar.runtime.worker_runtime import DeliveryTakenBack
from stackkit import (BASE_IMAGES, RABBITMQ_3_IMAGE, RABBITMQ_4_3_IMAGE, ROOT, cannot_run, ensure_built,
                      require_engine, run)
from test_worker_behaviour import write_handler

pytestmark = pytest.mark.containers

CONSUMER_TIMEOUT_MS = 3000
VERSIONS = {"3.x": ("3.10.", RABBITMQ_3_IMAGE), "4.0": ("4.0.", BASE_IMAGES["NIGHTJAR_RABBITMQ_IMAGE"]),
            "4.3": ("4.3.", RABBITMQ_4_3_IMAGE)}


class BrokerContainer:
    """One RabbitMQ container with a user of its own, its AMQP port published on 127.0.0.1."""

    def __init__(self, image):
        self.name = f"nightjar-version-test-{secrets.token_hex(4)}"
        self.user, self.password = "lab-" + secrets.token_hex(3), secrets.token_hex(12)
        self.port = free_port()
        started = run(["docker", "run", "-d", "--name", self.name, "--hostname", "broker",
                       "-p", f"127.0.0.1:{self.port}:5672",
                       "-e", f"RABBITMQ_DEFAULT_USER={self.user}", "-e", f"RABBITMQ_DEFAULT_PASS={self.password}",
                       "-e", f"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-rabbit consumer_timeout {CONSUMER_TIMEOUT_MS}"
                             " -rabbit channel_tick_interval 500", image], env=None)
        assert started.returncode == 0, started.stderr
        self.url = f"amqp://{self.user}:{self.password}@127.0.0.1:{self.port}/%2F"

    def connect(self, user=None, password=None):
        credentials = pika.PlainCredentials(user or self.user, password or self.password)
        return pika.BlockingConnection(pika.ConnectionParameters(
            "127.0.0.1", self.port, credentials=credentials, connection_attempts=1, socket_timeout=2))

    def wait_ready(self, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            try:
                connection = self.connect()
            except (pika.exceptions.AMQPError, OSError):
                assert time.monotonic() < deadline, run(["docker", "logs", self.name], env=None).stdout[-2000:]
                time.sleep(0.3)
                continue
            connection.close()
            return run(["docker", "exec", self.name, "rabbitmqctl", "version"], env=None).stdout.strip()

    def stop_as_compose_does_and_start(self):
        """Stop the node as compose.yaml's brokers stop (SIGTERM, then SIGKILL once their
        stop_grace_period has passed: RabbitMQ 3.x is still stopping then), and start it again."""
        grace = re.search(r"\n  stop_grace_period: (\d+)s\n", (ROOT / "compose.yaml").read_text()).group(1)
        restarted = run(["docker", "restart", "--time", grace, self.name], env=None)
        assert restarted.returncode == 0, restarted.stderr
        self.wait_ready()

    def remove(self):
        run(["docker", "rm", "-f", self.name], env=None)


@pytest.fixture(scope="module", params=list(VERSIONS))
def broker(request):
    require_engine()
    prefix, image = VERSIONS[request.param]
    try:
        ensure_built(image)  # from Debian packages when missing
    except Exception as reason:  # noqa: BLE001  (Unavailable, or a build that failed)
        cannot_run(reason)
    container = BrokerContainer(image)
    try:
        container.version = container.wait_ready()
        assert container.version.startswith(prefix), (image, container.version)
        container.release = tuple(int(part) for part in container.version.split(".")[:2])
        yield container
    finally:
        container.remove()


@pytest.fixture
def lab(broker, tmp_path):
    lab = Lab(tmp_path, amqp_url=broker.url)
    yield lab
    lab.cleanup()


def test_the_image_takes_its_own_user_and_no_guest(broker):
    # RABBITMQ_DEFAULT_USER/PASS, as the official image honours them.
    broker.connect().close()
    with pytest.raises(pika.exceptions.ProbableAuthenticationError):
        broker.connect("guest", "guest")


def test_a_worker_that_keeps_stopping_without_an_ack_ends_in_the_dead_letter_queue(lab):
    # A handler that raises: the worker exits without acknowledging, its channel closes, and the
    # delivery counts toward the queue's limit on every version.
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            raise RuntimeError('always fails')
        """)
    registration_id = lab.register("Unlucky guest")
    for attempt in range(DELIVERY_LIMIT + 1):
        result = lab.run("worker.py")
        assert (result.returncode, result.stdout) == (1, f"Received {registration_id} redelivered={attempt > 0}\n")
    assert lab.run("worker.py").stdout == "No ready registrations\n"
    assert lab.depth() == (0, 1)
    connection = pika.BlockingConnection(pika.URLParameters(lab.amqp_url))
    try:
        _, properties, _ = connection.channel().basic_get(lab.settings.dead_letter_queue, auto_ack=True)
    finally:
        connection.close()
    assert properties.headers["x-first-death-reason"] == "delivery_limit"


def test_a_nack_with_requeue_counts_toward_the_limit_before_rabbitmq_4_3(broker, lab):
    # The docs: on RabbitMQ 3.x and 4.0-4.2 a nack with requeue=True counts; from 4.3 on it does not.
    if broker.release >= (4, 3):
        pytest.skip("from 4.3 it does not count (test_what_counts_toward_the_delivery_limit): --drain never ends")
    write_handler(lab, """\
        def handle(ch, delivery, job, db, pause):
            ch.basic_nack(delivery.delivery_tag, requeue=True)
        """)
    registration_id = lab.register("Requeued guest")
    drained = lab.run("worker.py", "--drain")
    received = [f"Received {registration_id} redelivered={n > 0}" for n in range(DELIVERY_LIMIT + 1)]
    assert drained.returncode == 0, drained.stderr
    assert drained.stdout.splitlines() == [line for pair in zip(received, ["Handler returned."] * len(received))
                                           for line in pair] + ["No ready registrations"]
    assert lab.depth() == (0, 1)


def declare_limited_queue(channel, limit):
    """A quorum queue of the test's own with x-delivery-limit `limit` (None: the broker's default)
    and a dead-letter queue; one persistent message published to it, confirmed. Returns (queue,
    dead-letter queue)."""
    queue = f"version-test-{secrets.token_hex(4)}"
    channel.queue_declare(f"{queue}.dead", durable=True, arguments={"x-queue-type": "quorum"})
    arguments = {"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{queue}.dead"}
    if limit is not None:
        arguments["x-delivery-limit"] = limit
    channel.queue_declare(queue, durable=True, arguments=arguments)
    channel.confirm_delivery()
    channel.basic_publish("", queue, b"job", pika.BasicProperties(delivery_mode=2))
    return queue, f"{queue}.dead"


def next_delivery(channel, queue, dead_letter_queue, timeout=10):
    """(method, headers) of the queue's next delivery, or None once the message is dead-lettered."""
    deadline = time.monotonic() + timeout
    while True:
        method, properties, _ = channel.basic_get(queue)
        if method is not None:
            return method, properties.headers or {}
        if channel.queue_declare(dead_letter_queue, passive=True).method.message_count:
            return None
        assert time.monotonic() < deadline, f"{queue}: no delivery and no dead letter in {timeout} s"
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["stops", "reject", "nack"])
def test_what_counts_toward_the_delivery_limit(broker, how):
    # The docs: a worker that stops without acknowledging, and a reject with requeue, count on every
    # version; a nack with requeue only before 4.3. From 4.3 a nack is counted in x-acquired-count
    # instead (x-delivery-count stays unset), and the message keeps going round.
    limit, attempts = 2, 5
    counts = how != "nack" or broker.release < (4, 3)
    connection = broker.connect()
    try:
        channel = connection.channel()
        queue, dead_letter_queue = declare_limited_queue(channel, limit)
        headers = []
        for _ in range(attempts):
            delivery = next_delivery(channel, queue, dead_letter_queue)
            if delivery is None:
                break
            method, received = delivery
            headers.append((received.get("x-delivery-count"), received.get("x-acquired-count")))
            if how == "stops":  # its channel closes with the delivery unacknowledged
                channel.close()
                channel = connection.channel()
            elif how == "reject":
                channel.basic_reject(method.delivery_tag, requeue=True)
            else:
                channel.basic_nack(method.delivery_tag, requeue=True)
        comes_back = next_delivery(channel, queue, dead_letter_queue) is not None
        dead = channel.queue_declare(dead_letter_queue, passive=True).method.message_count
    finally:
        connection.close()
    if counts:
        assert (len(headers), comes_back, dead) == (limit + 1, False, 1), headers
        assert headers[-1][0] == limit  # x-delivery-count: the deliveries before this one
    else:
        assert (len(headers), comes_back, dead) == (attempts, True, 0), headers
        assert headers == [(None, None)] + [(None, n) for n in range(1, attempts)]


def test_a_quorum_queue_without_a_limit_has_one_of_20_from_4_0(broker):
    # The docs: 3.x sets no delivery limit by default, 4.0 and later one of 20 (so the lab sets its
    # own, and its dead-letter queue, which sets none, has 20 on 4.x).
    attempts = 25
    connection = broker.connect()
    try:
        channel = connection.channel()
        queue, dead_letter_queue = declare_limited_queue(channel, None)
        deliveries = 0
        while deliveries < attempts and (delivery := next_delivery(channel, queue, dead_letter_queue)):
            deliveries += 1
            channel.basic_reject(delivery[0].delivery_tag, requeue=True)
    finally:
        connection.close()
    assert deliveries == (attempts if broker.release < (4, 0) else 20 + 1)


def test_the_consumer_timeout_on_a_quorum_queue_consumer_and_on_a_classic_queue(broker):
    # The docs: before 4.3 a delivery held past the consumer timeout closes its channel, on every
    # kind of queue and however it was taken. From 4.3 a quorum queue returns the delivery and
    # cancels its consumer, the channel staying open, and a classic queue no longer checks it.
    # (A basic_get from a quorum queue, as the worker takes its delivery: the test below.)
    connection = broker.connect()
    try:
        admin = connection.channel()
        quorum, classic = (f"version-test-{secrets.token_hex(4)}" for _ in range(2))
        admin.queue_declare(quorum, durable=True, arguments={"x-queue-type": "quorum"})
        admin.queue_declare(classic, durable=True)
        admin.confirm_delivery()
        for queue in (quorum, classic):
            admin.basic_publish("", queue, b"job", pika.BasicProperties(delivery_mode=2))
        consuming, getting = connection.channel(), connection.channel()
        delivered, cancelled = [], []
        consuming.add_on_cancel_callback(cancelled.append)
        consuming.basic_consume(quorum, lambda *delivery: delivered.append(delivery))
        assert getting.basic_get(classic)[0] is not None
        deadline, settled = time.monotonic() + CONSUMER_TIMEOUT_MS / 1000 + 10, None
        while settled is None or time.monotonic() < settled:
            assert time.monotonic() < deadline, "the consumer outlasted the consumer timeout"
            connection.process_data_events(time_limit=0.1)
            if settled is None and (cancelled or not consuming.is_open):
                # The classic queue's delivery, taken at the same moment, has had as long (and a
                # second more, two of the channels' ticks).
                settled = time.monotonic() + 1
        ready = [admin.queue_declare(queue, passive=True).method.message_count for queue in (quorum, classic)]
        seen = (len(delivered), len(cancelled), consuming.is_open, getting.is_open, ready)
    finally:
        connection.close()
    if broker.release < (4, 3):
        assert seen == (1, 0, False, False, [1, 1])
    else:
        assert seen == (1, 1, True, True, [1, 0])


def test_a_pause_longer_than_the_consumer_timeout_stops_the_worker_and_loses_nothing(lab):
    lab.use_handler("unit2")
    registration_id = lab.register("Slow guest")
    worker = lab.start("worker.py", "--pause", "before-write")
    worker.wait_for("Paused before-write.")
    # RabbitMQ takes the delivery back and closes the worker's channel; the worker says so and
    # stops, before handle() writes a ticket RabbitMQ would make it write twice.
    assert worker.finish(timeout=CONSUMER_TIMEOUT_MS / 1000 + 20) == 1
    assert worker.lines == [f"Received {registration_id} redelivered=False", "Paused before-write."]
    assert worker.stderr == DeliveryTakenBack(registration_id).line() + "\n"
    assert ticket_rows(lab.tickets(registration_id)) == []
    assert lab.depth() == (1, 0)
    again = lab.run("worker.py")
    assert (again.returncode, again.stdout) == (0, f"Received {registration_id} redelivered=True\nHandler returned.\n")
    assert ticket_rows(lab.tickets(registration_id)) == [(2, registration_id, "Slow guest")]
    story = lab.run("desk.py", "history", registration_id).stdout.splitlines()
    assert [" ".join(line.split()[2:]) for line in story[1:]] == [
        "delivery 1 redelivered=False paused at before-write connection to RabbitMQ lost (not acknowledged)",
        "delivery 2 redelivered=True ticket 2 committed acked"]


def test_a_confirmed_registration_survives_a_broker_killed_while_it_stops(broker, lab):
    # What RabbitMQ confirmed is on disk, so a broker still stopping after its grace period is killed.
    lab.use_handler("unit3")
    registration_id = lab.register("Queued guest")  # returns once RabbitMQ confirmed it
    broker.stop_as_compose_does_and_start()
    assert lab.depth() == (1, 0)
    taken = lab.run("worker.py")
    assert (taken.returncode, taken.stdout) == (0, f"Received {registration_id} redelivered=False\nHandler returned.\n")
    assert lab.depth() == (0, 0)
    # And the queue takes new registrations again: a publish is confirmed.
    later = lab.register("After the restart")
    assert lab.run("worker.py").stdout == f"Received {later} redelivered=False\nHandler returned.\n"
