"""RabbitMQ: connecting, the queue topology, publishing jobs, queue depth."""

import pika
import pika.exceptions

from .config import redact_url
from .messages import encode_job

# A message delivered this many times more than once goes to the dead-letter
# queue. High enough that the lab's own interruptions (two or three per
# message) never reach it; set explicitly, as RabbitMQ 3.x has no default (4.x
# one of 20). What counts differs (docs/explanation/rabbitmq-versions.md): a worker
# that stops without acknowledging and a reject with requeue count on every
# version, a nack with requeue only before RabbitMQ 4.3.
DELIVERY_LIMIT = 20


class BrokerUnavailable(Exception):
    """RabbitMQ could not be reached; the text names the address."""


# What pika raises when an open connection goes away: RabbitMQ was stopped
# (ConnectionClosedByBroker) or the network connection broke (StreamLostError).
ConnectionLost = pika.exceptions.AMQPConnectionError


def connect(settings, name=None, blocked_timeout=30):
    """A BlockingConnection; name: what the management UI calls it (else its address).

    blocked_timeout: seconds RabbitMQ may hold the connection blocked (a memory or disk
    alarm) before it is dropped; None: as long as RabbitMQ keeps it (a publisher whose
    confirm is waited for with a limit of its own, nightjar/queueing.py).
    """
    params = pika.URLParameters(settings.amqp_url)
    if name:
        params.client_properties = {"connection_name": name}
    params.heartbeat = settings.heartbeat
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.blocked_connection_timeout = blocked_timeout
    try:
        return pika.BlockingConnection(params)
    except (pika.exceptions.AMQPError, OSError) as error:
        reason = describe_error(error)
        raise BrokerUnavailable(
            f"Cannot reach RabbitMQ at {redact_url(settings.amqp_url)} ({reason})."
            " Start the lab with 'make local' (or 'make up'), or set NIGHTJAR_AMQP_URL."
        ) from None


def describe_error(error):
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return "login refused: check the user and password in NIGHTJAR_AMQP_URL"
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return "access to the virtual host refused"
    # pika wraps the socket error; its text is in the arguments.
    text = repr(error)
    if "Connection refused" in text:
        return "connection refused: is RabbitMQ running?"
    if "gaierror" in text or "Name or service not known" in text:
        return "unknown host name"
    if "timed out" in text.lower() or "Timeout" in text:
        return "no answer in time"
    return text.splitlines()[0][:200]


def open_channel(connection, settings):
    """A channel in publisher-confirm mode with the lab's queues declared."""
    channel = connection.channel()
    declare_queues(channel, settings)
    channel.confirm_delivery()
    return channel


def declare_queues(channel, settings):
    # Quorum queues count deliveries, so a message that keeps failing ends in
    # the dead-letter queue instead of looping forever. The dead-letter queue
    # sets no limit (on 4.x RabbitMQ's default of 20 applies to it). Changing
    # these arguments would make RabbitMQ refuse the lab's existing queues.
    channel.queue_declare(
        settings.dead_letter_queue, durable=True, arguments={"x-queue-type": "quorum"}
    )
    channel.queue_declare(
        settings.queue,
        durable=True,
        arguments={
            "x-queue-type": "quorum",
            "x-delivery-limit": DELIVERY_LIMIT,
            "x-dead-letter-exchange": "",
            "x-dead-letter-routing-key": settings.dead_letter_queue,
        },
    )


def publish_job(channel, settings, registration_id, name):
    """Publish one persistent job; returns once RabbitMQ confirmed it.

    The channel must come from open_channel (confirm mode): a refused or
    unroutable message raises instead of being lost silently.
    """
    channel.basic_publish(
        exchange="",
        routing_key=settings.queue,
        body=encode_job(registration_id, name),
        properties=pika.BasicProperties(
            content_type="application/json", delivery_mode=pika.DeliveryMode.Persistent
        ),
        mandatory=True,
    )


def ready_count(channel, queue):
    """Messages ready for delivery (RabbitMQ does not count unacknowledged ones here)."""
    return channel.queue_declare(queue, passive=True).method.message_count


def queue_depths(settings):
    """(ready, dead-lettered) messages of the lab's queues, read without consuming."""
    connection = connect(settings)
    try:
        channel = connection.channel()
        declare_queues(channel, settings)
        return (ready_count(channel, settings.queue),
                ready_count(channel, settings.dead_letter_queue))
    finally:
        connection.close()


def delete_queues(settings):
    """Remove the lab's queue and its dead-letter queue (throwaway labs clean up with it)."""
    connection = connect(settings)
    try:
        channel = connection.channel()
        for queue in (settings.queue, settings.dead_letter_queue):
            channel.queue_delete(queue)
    finally:
        connection.close()


class NotCounted(Exception):
    """The management API gave no unacknowledged count; the text says why, in a few words."""

    def __init__(self, reason, answered=False):
        super().__init__(reason)
        self.answered = answered  # the API answered, but has no count for the queue yet


def unacknowledged_count(settings):
    """Unacknowledged deliveries of the lab's queue, from the management API; NotCounted otherwise.

    AMQP cannot count deliveries that other connections hold; only the
    management API can. It logs in with the management URL's user, else the AMQP URL's.
    """
    # Imported here: only desk.py status needs them, and they would slow
    # every worker start by ~50 ms.
    import base64
    import json
    import urllib.parse
    import urllib.request

    amqp = urllib.parse.urlsplit(settings.amqp_url)
    api = urllib.parse.urlsplit(settings.management_api)
    vhost = urllib.parse.unquote(amqp.path[1:]) if len(amqp.path) > 1 else "/"
    login = api if api.username else amqp
    user = urllib.parse.unquote(login.username or "guest")
    password = urllib.parse.unquote(login.password or "guest")
    base = f"{api.scheme}://{api.hostname}" + (f":{api.port}" if api.port else "") + api.path
    url = (f"{base}api/queues/{urllib.parse.quote(vhost, safe='')}/"
           f"{urllib.parse.quote(settings.queue, safe='')}")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            queue = json.load(response)
    except (OSError, ValueError):  # urllib's errors are OSErrors
        raise NotCounted(f"does not answer at {redact_url(settings.management_api)}") from None
    if "messages_unacknowledged" not in queue:
        # A queue's first statistics take some seconds to appear.
        raise NotCounted(f"at {redact_url(settings.management_api)} has no count for the queue"
                         " yet (try again in a few seconds)", answered=True)
    return int(queue["messages_unacknowledged"])
