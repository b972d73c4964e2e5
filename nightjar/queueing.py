"""Registering a guest: save first, then queue, and never lose a registration.

The registration row is committed before anything is published. `queued_at`
is set only after RabbitMQ confirmed the job, so a registration saved while
the broker was down stays visible as waiting and `queue_waiting` publishes it
once the broker is back.

A confirm is waited for settings.confirm_seconds at most: a RabbitMQ with a
memory alarm takes a publish and holds it, a quorum queue without a leader
does not answer. The registration is then reported as saved and waiting for
the queue, and its publish goes on in the background on its own connection,
because RabbitMQ may still route it (a blocked connection's publish is
routed once the alarm clears): it is not published again meanwhile, and
nothing else of this process is published until it is answered. Its late
confirm marks it queued; a refusal leaves it to `queue_waiting`. A connection
lost while waiting (or a process that ended, as desk.py does) leaves unknown
whether RabbitMQ routed it: `queue_waiting` publishes it again, so it may be
delivered twice (docs/explanation/delivery.md).
"""

import contextlib
import enum
import logging
import threading
import time

import pika.exceptions

from . import broker, db as database, registrations

log = logging.getLogger("nightjar.queueing")


def grace_seconds(settings):
    """How long queue_waiting leaves a fresh row alone: its own request (in this process or
    another, such as desk.py register) may still be publishing it, waiting for its confirm
    confirm_seconds at most, and taking it too would queue it twice. The 2 s more cover
    connecting and created_at's whole seconds."""
    return settings.confirm_seconds + 2


class Outcome(enum.Enum):
    """What register() did with the registration it saved; true only when it is queued."""

    QUEUED = "queued"
    # Published, and RabbitMQ has not confirmed it within the limit (or holds an earlier one).
    UNCONFIRMED = "waiting for RabbitMQ's confirm"
    UNREACHABLE = "RabbitMQ did not take it"  # unreachable, or it refused the job

    def __bool__(self):
        return self is Outcome.QUEUED


class ConfirmPending(Exception):
    """RabbitMQ has not confirmed a job within settings.confirm_seconds. Its publish goes on in
    the background with its connection: the channel is no longer the caller's."""


_lock = threading.Lock()
_publishing = {}  # registration ID -> its _Publish, while this process waits for its confirm


def _in_progress():
    with _lock:
        return dict(_publishing)


def held_by_rabbitmq():
    """Whether a job of this process waits for its confirm past the limit."""
    return any(publish.late for publish in _in_progress().values())


class _Publish:
    """broker.publish_job in a thread of its own, so that its confirm is waited for with a
    limit; one not confirmed in time is finished by that thread when RabbitMQ answers."""

    def __init__(self, channel, settings, registration_id, name):
        self.channel, self.settings, self.registration_id = channel, settings, registration_id
        self.error = None
        self.finished = self.late = False
        self._state = threading.Lock()
        with _lock:
            _publishing[registration_id] = self
        self.thread = threading.Thread(target=self._run, args=(name,), daemon=True,
                                       name=f"nightjar-publish-{registration_id}")
        self.thread.start()

    def confirmed_in(self, seconds):
        """True once RabbitMQ confirmed it, False when it has not answered in `seconds`;
        raises what RabbitMQ answered instead (a nack, a return, a lost connection)."""
        self.thread.join(seconds)
        with self._state:
            self.late = not self.finished
        if self.late:
            log.info("%s: RabbitMQ has not confirmed its job within %g s; still waiting for it",
                     self.registration_id, seconds)
            return False
        self._forget()
        if self.error is not None:
            raise self.error
        return True

    def _run(self, name):
        try:
            broker.publish_job(self.channel, self.settings, self.registration_id, name)
        except BaseException as error:  # for whoever waits, or for the log when late
            self.error = error
        with self._state:
            self.finished = True
            late = self.late
        if late:
            self._finish_late()

    def _finish_late(self):
        try:
            if self.error is None:
                db = database.connect(self.settings.db_path)
                try:
                    registrations.mark_queued(db, self.registration_id)
                finally:
                    db.close()
                log.info("%s: RabbitMQ confirmed its job late; queued", self.registration_id)
            else:
                log.warning("%s: no confirm from RabbitMQ (%s); it waits to be queued again",
                            self.registration_id, broker.describe_error(self.error))
        finally:
            _close_quietly(self.channel.connection)
            self._forget()

    def _forget(self):
        with _lock:
            if _publishing.get(self.registration_id) is self:
                del _publishing[self.registration_id]


def _close_quietly(connection):
    if connection is not None and connection.is_open:
        try:
            connection.close()
        except Exception:  # pika.exceptions.AMQPError, or a broken connection's ValueError
            pass


@contextlib.contextmanager
def publisher(settings):
    """A confirm-mode channel on a connection of its own, closed afterwards (unless a publish
    still waits for its confirm on it: ConfirmPending)."""
    connection = broker.connect(settings, blocked_timeout=None)  # queue_registration limits it
    try:
        yield broker.open_channel(connection, settings)
    except ConfirmPending:
        connection = None  # the waiting publish closes it
        raise
    finally:
        _close_quietly(connection)


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
            self._connection = broker.connect(self.settings, self.name, blocked_timeout=None)
            try:
                self._channel = broker.open_channel(self._connection, self.settings)
            except BaseException:
                self.close()
                raise
        try:
            yield self._channel
        except ConfirmPending:
            self._connection = self._channel = None  # the waiting publish has it now
            raise
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
        _close_quietly(connection)


def queue_registration(db, channel, settings, registration_id, name):
    """Publish the registration's job and mark it queued once RabbitMQ confirmed it.

    ConfirmPending when RabbitMQ has not confirmed it within settings.confirm_seconds
    (see above); what publish_job raises when RabbitMQ refuses it or the connection is lost.
    """
    if not _Publish(channel, settings, registration_id, name).confirmed_in(settings.confirm_seconds):
        raise ConfirmPending(registration_id)
    registrations.mark_queued(db, registration_id)


def register(db, settings, name, kept=None):
    """Save a registration and queue it. Returns (id, Outcome); the Outcome is true once queued.

    Unless it is queued, the registration is saved all the same, and queue_waiting
    sends it later (or its late confirm marks it queued: Outcome.UNCONFIRMED).
    Raises registrations.InvalidName for a name that cannot be saved.
    kept: a KeptPublisher to publish with (else a connection of its own).
    """
    name = registrations.clean_name(name)
    registration_id = registrations.create(db, name)
    if held_by_rabbitmq():
        return registration_id, Outcome.UNCONFIRMED  # queue_waiting sends it once RabbitMQ answered
    try:
        with (kept.channel() if kept else publisher(settings)) as channel:
            queue_registration(db, channel, settings, registration_id, name)
    except ConfirmPending:
        return registration_id, Outcome.UNCONFIRMED
    except (broker.BrokerUnavailable, pika.exceptions.AMQPError):
        return registration_id, Outcome.UNREACHABLE
    return registration_id, Outcome.QUEUED


def register_at(db_path, settings, name):
    """register() on the database at db_path, opened for this one registration."""
    db = database.connect(db_path)
    try:
        return register(db, settings, name)
    finally:
        db.close()


def waiting(db, settings):
    """(id, name) of the saved registrations to publish now: never queued, older than the
    grace, not being published by this process; none while RabbitMQ holds a job of it."""
    if held_by_rabbitmq():
        return []
    publishing = _in_progress()
    return [(registration_id, name) for registration_id, name
            in registrations.unqueued(db, grace_seconds(settings)) if registration_id not in publishing]


def queue_waiting(db, channel, settings):
    """Publish every registration waiting() names; returns their IDs (ConfirmPending: see
    queue_registration)."""
    queued = []
    for registration_id, name in waiting(db, settings):
        queue_registration(db, channel, settings, registration_id, name)
        queued.append(registration_id)
    return queued
