"""Registering a guest: save first, then queue, and never lose a registration.

The registration row is committed before anything is published. `queued_at`
is set only after RabbitMQ confirmed the job, so a registration saved while
the broker was down stays visible as waiting and `queue_waiting` publishes it
once the broker is back.
"""

import contextlib

import pika.exceptions

from . import broker, db as database, registrations

# queue_waiting leaves fresh rows alone for this long: their own request is
# still publishing them, and taking them too would queue them twice.
GRACE_SECONDS = 5


@contextlib.contextmanager
def publisher(settings):
    """A confirm-mode channel on a connection of its own, closed afterwards."""
    connection = broker.connect(settings)
    try:
        yield broker.open_channel(connection, settings)
    finally:
        if connection.is_open:
            connection.close()


def queue_registration(db, channel, settings, registration_id, name):
    broker.publish_job(channel, settings, registration_id, name)
    registrations.mark_queued(db, registration_id)


def register(db, settings, name):
    """Save a registration and queue it. Returns (id, queued).

    queued is False when RabbitMQ could not take the job now; the
    registration is saved all the same and queue_waiting sends it later.
    Raises registrations.InvalidName for a name that cannot be saved.
    """
    name = registrations.clean_name(name)
    registration_id = registrations.create(db, name)
    try:
        with publisher(settings) as channel:
            queue_registration(db, channel, settings, registration_id, name)
    except (broker.BrokerUnavailable, pika.exceptions.AMQPError):
        return registration_id, False
    return registration_id, True


def register_at(db_path, settings, name):
    """register() on the database at db_path, opened for this one registration."""
    db = database.connect(db_path)
    try:
        return register(db, settings, name)
    finally:
        db.close()


def queue_waiting(db, channel, settings, grace_seconds=GRACE_SECONDS):
    """Publish every saved registration that was never queued; returns their IDs."""
    waiting = registrations.unqueued(db, grace_seconds)
    for registration_id, name in waiting:
        queue_registration(db, channel, settings, registration_id, name)
    return [registration_id for registration_id, _ in waiting]
