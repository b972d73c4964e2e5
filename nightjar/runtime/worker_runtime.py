"""The machinery behind ticket-desk/worker.py: options, signals, loading handler.py, the
connection and database, the heartbeat-safe pause, and the checks after handle().

worker.py itself shows the delivery loop; everything here is plumbing around it.
"""

import argparse
import contextlib
import os
from dataclasses import dataclass
import select
import signal
import sys
import traceback

import pika.exceptions

from .. import broker, db as database, events
from ..broker import ConnectionLost  # noqa: F401  (worker.py lets it through to run())
from ..config import Settings
from ..messages import BadMessage, decode_job
from .history_recorder import Recorder

# The checkpoints the lab's handlers use (see handler.py).
PAUSE_POINTS = ("before-write", "inside-transaction", "after-commit")


def parse_options(argv):
    parser = argparse.ArgumentParser(
        prog="worker.py",
        description="Take one ready registration from RabbitMQ and pass it to handler.handle.",
    )
    parser.add_argument(
        "--pause", metavar="POINT", choices=PAUSE_POINTS,
        help="stop at checkpoint POINT and wait: Enter continues, Ctrl+C stops the worker"
        f" (one of: {', '.join(PAUSE_POINTS)}). A pause waits for a person: a line of input"
        " is Enter, but the end of input is not, so a worker whose input has ended (run by a"
        " script, or by `docker compose exec -T`) stays paused until Ctrl+C (SIGINT)",
    )
    parser.add_argument("--drain", action="store_true",
                        help="repeat until no registration is ready")
    return parser.parse_args(argv)


def run(main):
    """Run main() and exit with its status; Ctrl+C exits 130 without a traceback."""
    sys.stdout.reconfigure(line_buffering=True)
    # Ctrl+C is how the lab stops a worker. A worker started in the background
    # of a non-interactive shell inherits SIGINT ignored; take it back.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        status = main()
    except KeyboardInterrupt:
        if sys.stdout.isatty():
            print()  # the terminal echoed ^C; the shell's prompt starts on a line of its own
        status = 130
    except broker.BrokerUnavailable as error:
        print(error, file=sys.stderr)
        status = 1
    except DeliveryTakenBack as taken:
        print(taken.line(), file=sys.stderr)
        status = 1
    except ConnectionLost as error:
        print(connection_lost_line(error), file=sys.stderr)
        status = 1
    sys.exit(status)


def connection_lost_line(error):
    """One line for RabbitMQ going away while the worker runs: why, and that nothing is lost."""
    if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
        why = f"RabbitMQ closed it: {error.reply_text}"
    else:
        why = "the network connection broke"
    return (f"The connection to RabbitMQ was lost ({why}). Nothing is lost: RabbitMQ keeps any"
            " delivery this worker had not acknowledged and will deliver it again; run the worker"
            " again once RabbitMQ is back.")


class DeliveryTakenBack(BaseException):
    """RabbitMQ closed the worker's channel during a pause, taking the delivery back.

    A BaseException, as Ctrl+C's KeyboardInterrupt is: it ends the worker
    whatever handle() catches, so handle() writes nothing more for a delivery
    RabbitMQ will deliver again.
    """

    def __init__(self, registration_id):
        super().__init__(registration_id)
        self.registration_id = registration_id

    def line(self):
        rid = self.registration_id
        return (f"RabbitMQ took {rid} back during the pause: a delivery left unacknowledged longer"
                " than RabbitMQ's consumer timeout (30 minutes unless the broker sets another) goes"
                " back to the queue, and RabbitMQ closes the channel it was delivered on. The worker"
                f" stopped before handle() went on; run it again to take {rid} (redelivered=True).")


def import_handler():
    """The learner's handler.py (beside worker.py); a clear error if it does not load."""
    try:
        # The import statement (unlike importlib.import_module) leaves
        # importlib's own frames out of a traceback.
        import handler
        return handler
    except SyntaxError as error:  # IndentationError and TabError too
        events.record("load-failed", **events.error_fields(error))
        print(syntax_error_line(error), file=sys.stderr)
        raise SystemExit(1)
    except Exception as error:
        events.record("load-failed", **events.error_fields(error))
        print("handler.py could not be loaded; fix it and run the worker again:", file=sys.stderr)
        # From handler.py on: this function's own frame tells the learner nothing.
        traceback.print_exception(type(error), error, error.__traceback__.tb_next, file=sys.stderr)
        raise SystemExit(1)


def syntax_error_line(error):
    """One line: what is wrong, in which file, on which line (the grader reads its start too)."""
    where = os.path.relpath(error.filename) if error.filename else "handler.py"
    return (f"handler.py could not be loaded: {type(error).__name__} in {where},"
            f" line {error.lineno}: {error.msg}. Fix it and run the worker again.")


@dataclass
class Session:
    """One run of the worker: its RabbitMQ connection and channel, and the database."""

    connection: object
    channel: object
    db: object
    settings: Settings


@contextlib.contextmanager
def session():
    """A Session from the environment's settings, closed afterwards.

    While it is open, each delivery's story goes into the delivery history
    (nightjar/history.py), including a stop by Ctrl+C or a lost connection.
    """
    settings = Settings.from_env()
    connection = broker.connect(settings)
    db = database.connect(settings.db_path)
    recorder = Recorder.start(settings, db)
    try:
        channel = ReceivingChannel(connection.channel())
        broker.declare_queues(channel, settings)
        yield Session(connection, channel, db, settings)
    except KeyboardInterrupt:
        if recorder:
            recorder.stopped("interrupted")
        raise
    except ConnectionLost as error:
        if recorder:
            recorder.stopped("connection-lost", type=type(error).__name__)
        raise
    finally:
        if recorder:
            recorder.close()
        db.close()  # an open transaction is rolled back, never committed
        if connection.is_open:
            connection.close()


class ReceivingChannel:
    """The worker's channel: each job basic_get takes is recorded as a `received` event."""

    def __init__(self, channel):
        self._channel = channel

    def basic_get(self, queue, *args, **kwargs):
        try:
            delivery, properties, body = self._channel.basic_get(queue, *args, **kwargs)
        except pika.exceptions.AMQPError as error:
            events.record("connection-lost", during="basic_get", **events.error_fields(error))
            raise
        if delivery is not None and events.wanted():
            try:
                job = decode_job(body)
            except BadMessage:
                pass  # not a job: the worker sets it aside
            else:
                events.record("received", id=job["id"], name=job["name"],
                              redelivered=delivery.redelivered, tag=delivery.delivery_tag)
        return delivery, properties, body

    def __getattr__(self, name):
        return getattr(self._channel, name)


class Pause:
    """The `pause` argument of handle(): which checkpoint to stop at, if any, for one delivery."""

    def __init__(self, point, session, registration_id):
        self.point = point
        self.reached = False
        self._session = session
        self._registration_id = registration_id

    def hold(self, name):
        """Print `Paused NAME.` and wait for Enter, keeping RabbitMQ's connection alive.

        A plain input() would block heartbeats, and RabbitMQ would drop the
        connection during a long pause; here we poll stdin and let pika
        answer heartbeats in between. A pause waits for a person: the end of
        input (a script's, or `docker compose exec -T`'s) is not Enter, so
        only Ctrl+C ends the pause then. A pause longer than RabbitMQ's
        consumer timeout ends in DeliveryTakenBack, Enter or not.
        """
        self.reached = True
        events.record("paused", point=name)  # before the line the grader acts on
        print(f"Paused {name}.", flush=True)
        watched = [sys.stdin] if sys.stdin else []
        entered = False
        while True:
            self._session.connection.process_data_events(time_limit=0)
            if self._session.channel.is_closed:
                events.record("connection-lost", during="pause", type="ChannelClosedByBroker")
                raise DeliveryTakenBack(self._registration_id)
            if entered:
                return  # Enter, and RabbitMQ still holds the delivery for this worker: carry on
            ready, _, _ = select.select(watched, [], [], 0.2)
            if ready:
                if sys.stdin.readline():
                    entered = True  # one more look at the channel first
                elif not sys.stdin.isatty():
                    watched = []  # the end of input; a terminal's Ctrl+D is not Enter either


class TrackedChannel:
    """The channel handed to handle(), remembering whether the delivery was settled.

    Each ack, nack and reject that reaches RabbitMQ is also recorded as an
    event (see events.py), and so is a lost connection.
    """

    def __init__(self, channel):
        self._channel = channel
        self.acknowledged = set()

    def basic_ack(self, delivery_tag=0, multiple=False):
        if delivery_tag in self.acknowledged:
            events.record("double-ack", tag=delivery_tag)
            raise RuntimeError(
                f"delivery {delivery_tag} was already acknowledged;"
                " acknowledging it twice would close the channel"
            )
        self._settle("basic_ack", delivery_tag, multiple)
        events.record("ack", tag=delivery_tag, multiple=multiple)

    def basic_nack(self, delivery_tag=0, multiple=False, requeue=True):
        self._settle("basic_nack", delivery_tag, multiple, requeue)
        events.record("nack", tag=delivery_tag, multiple=multiple, requeue=requeue)

    def basic_reject(self, delivery_tag=0, requeue=True):
        self._settle("basic_reject", delivery_tag, requeue)
        events.record("reject", tag=delivery_tag, requeue=requeue)

    def _settle(self, method, delivery_tag, *args):
        try:
            getattr(self._channel, method)(delivery_tag, *args)
        except pika.exceptions.AMQPError as error:
            events.record("connection-lost", during=method,
                          **events.error_fields(error, traceback.extract_stack()))
            raise
        self.acknowledged.add(delivery_tag)

    def __getattr__(self, name):
        return getattr(self._channel, name)


def report_handler_error(error, job, acknowledged):
    """Show the learner's traceback (from handler.py on) and what happens to the job."""
    events.record("raised", id=job["id"], **events.error_fields(error))
    print(f"handler.py raised an error while processing {job['id']}:", file=sys.stderr)
    traceback.print_exception(type(error), error, error.__traceback__.tb_next, file=sys.stderr)
    if acknowledged:
        print(f"{job['id']} was already acknowledged, so RabbitMQ will not deliver it again.",
              file=sys.stderr)
    else:
        print(f"{job['id']} was not acknowledged: RabbitMQ will deliver it again.",
              file=sys.stderr)


def check_after_handler(job, db, pause, acknowledged):
    """Problems the handler left behind, each printed on one line; True when there were none."""
    events.record("returned", id=job["id"])
    ok = True
    if db.in_transaction:
        db.rollback()
        events.record("transaction-open", id=job["id"])
        print(f"handler.py left a transaction open, so its writes for {job['id']} were rolled"
              " back: put them inside 'with db:'.", file=sys.stderr)
        ok = False
    if pause.point and not pause.reached:
        events.record("pause-not-reached", id=job["id"], point=pause.point)
        print(f"Pause point {pause.point} was never reached: handler.py has no"
              f" checkpoint(pause, '{pause.point}') on this path.", file=sys.stderr)
        ok = False
    if not acknowledged:
        events.record("no-ack", id=job["id"])
        print(f"handler.py returned without acknowledging {job['id']}:"
              " RabbitMQ will deliver it again once this worker exits.", file=sys.stderr)
        ok = False
    return ok
