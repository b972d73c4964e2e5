"""Queue the registrations that were saved while RabbitMQ was down.

A registration is committed before it is published (nightjar.queueing), so
when RabbitMQ is unreachable the row stays with queued_at NULL. A thread in
the site process looks for such rows every few seconds and publishes them
once RabbitMQ answers again; queued_at is set after each confirm, so each is
queued once. A job whose confirm RabbitMQ still owes is not published again,
and nothing is published while one is owed (queueing.waiting).
"""

import logging
import threading

import pika.exceptions

from nightjar import broker, db as nightjar_db, queueing

log = logging.getLogger("nightjar_site.requeue")


def queue_waiting_once(settings):
    """Publish the waiting registrations, if any; returns their IDs ([] when RabbitMQ is down)."""
    db = nightjar_db.connect(settings.db_path)
    try:
        # Cheap check first: most of the time nothing waits and RabbitMQ is not contacted.
        if not queueing.waiting(db, settings):
            return []
        try:
            with queueing.publisher(settings) as channel:
                return queueing.queue_waiting(db, channel, settings)
        except (broker.BrokerUnavailable, pika.exceptions.AMQPError, queueing.ConfirmPending):
            return []
    finally:
        db.close()


def start(app):
    """Start the background thread for this app; returns it (a daemon, so it ends with the site)."""
    settings = app.config["NIGHTJAR"]
    interval = app.config["REQUEUE_SECONDS"]
    stop = threading.Event()

    def loop():
        while not stop.wait(interval):
            try:
                queued = queue_waiting_once(settings)
            except Exception:  # never let one bad round end the thread
                log.exception("queueing the waiting registrations failed")
                continue
            if queued:
                log.info("queued %d waiting registration(s): %s", len(queued), ", ".join(queued))

    thread = threading.Thread(target=loop, name="nightjar-requeue", daemon=True)
    thread.stop = stop
    thread.start()
    return thread
