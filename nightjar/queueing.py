"""Registering a guest: save first, then queue, and never lose a registration.

The registration row is committed before anything is published. `queued_at`
is set only after RabbitMQ confirmed the job, so a registration saved while
the broker was down stays visible as waiting and `queue_waiting` publishes it
once the broker is back.
"""

import contextlib
import time

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


class KeptPublisher:
    """publisher(), kept open from one registration to the next, for one thread (the site's).

    A connection of its own costs more than the rest of a registration (about
    3 ms of 5). Nothing answers RabbitMQ's heartbeats between registrations,
    so a connection idle for half the heartbeat interval is not used again,
    and one RabbitMQ closed meanwhile is replaced before anything is published.
    """

    def __init__(self, settings, name=None):
        self.settings, self.name = settings, name  # name: the connection's, in the management UI
        self._connection = self._channel = None
        self._last_used = 0.0

    @contextlib.contextmanager
    def channel(self):
        if self._connection is not None and not self._still_good():
            self.close()
        if self._connection is None:
            self._connection = broker.connect(self.settings, self.name)
            try:
                self._channel = broker.open_channel(self._connection, self.settings)
            except BaseException:
                self.close()
                raise
        try:
            yield self._channel
        except BaseException:
            self.close()  # in an unknown state: never used again
            raise
        self._last_used = time.monotonic()

    def _still_good(self):
        if time.monotonic() - self._last_used > self.settings.heartbeat / 2 or not self._open():
            return False
        try:
            self._connection.process_data_events(0)  # a close RabbitMQ sent is read now
        except pika.exceptions.AMQPError:
            return False
        return self._open()

    def _open(self):
        return self._connection.is_open and self._channel.is_open

    def close(self):
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception:  # pika.exceptions.AMQPError, or a broken connection's ValueError
                pass


def queue_registration(db, channel, settings, registration_id, name):
    broker.publish_job(channel, settings, registration_id, name)
    registrations.mark_queued(db, registration_id)


def register(db, settings, name, kept=None):
    """Save a registration and queue it. Returns (id, queued).

    queued is False when RabbitMQ could not take the job now; the
    registration is saved all the same and queue_waiting sends it later.
    Raises registrations.InvalidName for a name that cannot be saved.
    kept: a KeptPublisher to publish with (else a connection of its own).
    """
    name = registrations.clean_name(name)
    registration_id = registrations.create(db, name)
    try:
        with (kept.channel() if kept else publisher(settings)) as channel:
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
