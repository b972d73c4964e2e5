"""The ticket worker: take one registration from RabbitMQ and pass it to handler.py.

    python3 worker.py                  process one ready registration
    python3 worker.py --pause POINT    stop at checkpoint POINT (Enter continues, Ctrl+C stops)
    python3 worker.py --drain          repeat until no registration is ready

You only edit handler.py; this file stays as it is.
"""

import sys

from nightjar import workstation


def main():
    options = workstation.parse_options(sys.argv[1:])
    handler = workstation.import_handler()  # your handler.py, next to this file

    with workstation.session() as session:
        while True:
            # Ask RabbitMQ for one ready message (basic_get): it stays
            # unacknowledged, and RabbitMQ keeps it, until someone acks it.
            delivery, job = session.take_job()
            if delivery is None:
                print("No ready registrations")
                return 0

            # redelivered is RabbitMQ's own flag: True when an earlier
            # delivery of this message was never acknowledged.
            print(f"Received {job['id']} redelivered={delivery.redelivered}")

            ch = workstation.TrackedChannel(session.channel)
            pause = workstation.Pause(options.pause, session.connection)
            try:
                handler.handle(ch, delivery, job, session.db, pause)
            except Exception as error:
                workstation.report_handler_error(error, job, ch.acknowledged)
                return 1
            print("Handler returned.")

            if not workstation.check_after_handler(job, session.db, pause, ch.acknowledged):
                return 1
            if not options.drain:
                return 0


if __name__ == "__main__":
    workstation.run(main)
