"""The ticket worker: take one registration from RabbitMQ and pass it to handler.py.

    python3 worker.py                  process one ready registration
    python3 worker.py --pause POINT    stop at checkpoint POINT (Enter continues, Ctrl+C stops)
    python3 worker.py --drain          repeat until no registration is ready

You only edit handler.py; this file stays as it is. Read it to see what
happens to each message, from top to bottom.
"""

import sys

import common

try:
    from nightjar.runtime import worker_runtime  # the lab's own code: connection, database, pause
    from nightjar.messages import BadMessage, decode_job
except ModuleNotFoundError as missing:
    sys.exit(common.not_activated(missing))  # one line saying what to run first


def main():
    options = worker_runtime.parse_options(sys.argv[1:])
    handler = worker_runtime.import_handler()  # your handler.py, next to this file

    with worker_runtime.session() as session:
        channel = session.channel
        while True:
            # Ask RabbitMQ for one ready message. basic_get answers at once:
            # delivery is None when no message is ready. A message we get stays
            # unacknowledged: RabbitMQ keeps it until someone acks it, and
            # delivers it again if this worker stops first.
            delivery, properties, body = channel.basic_get(session.settings.queue)
            if delivery is None:
                print("No ready registrations")
                return 0

            # The body is JSON text, e.g. {"id": "R-0002", "name": "Normal guest"}.
            try:
                job = decode_job(body)
            except BadMessage as reason:
                # Not a registration: nack it without requeue, so RabbitMQ moves
                # it to the dead-letter queue, and take the next message.
                channel.basic_nack(delivery.delivery_tag, requeue=False)
                print(f"Set aside a message that is {reason}; it is in the dead-letter queue"
                      f" {session.settings.dead_letter_queue}.")
                continue

            # redelivered is RabbitMQ's own flag: True when an earlier
            # delivery of this message was never acknowledged.
            print(f"Received {job['id']} redelivered={delivery.redelivered}")

            # Your handle() decides when to ack (see handler.py).
            ch = worker_runtime.TrackedChannel(channel)  # the channel; notes whether handle() acked
            pause = worker_runtime.Pause(options.pause, session, job["id"])  # for checkpoint()
            try:
                handler.handle(ch, delivery, job, session.db, pause)
            except worker_runtime.ConnectionLost:
                raise  # RabbitMQ itself went away: one line says so, below
            except Exception as error:
                # handle() raised: show where, and stop without acking. Unless
                # handle() acked first, RabbitMQ still has the message and
                # delivers it again.
                worker_runtime.report_handler_error(error, job, ch.acknowledged)
                return 1
            print("Handler returned.")

            # Say so when handle() left something undone (no ack, an open transaction).
            if not worker_runtime.check_after_handler(job, session.db, pause, ch.acknowledged):
                return 1
            if not options.drain:
                return 0  # one message only; --drain goes round again


if __name__ == "__main__":
    worker_runtime.run(main)  # exit status; Ctrl+C exits 130; RabbitMQ going away is one line
