# Hostile: logs in to the machine's own RabbitMQ (the live lab's, under make local)
# and leaves a queue there; then tries every address of the machine.
import socket

import pika


def handle(ch, delivery, job, db, pause):
    reached = []
    for host in ("127.0.0.1", "localhost", socket.gethostname(), "10.0.2.2", "172.17.0.1"):
        try:
            params = pika.URLParameters(f"amqp://guest:guest@{host}:5672/%2F")
            params.socket_timeout = params.blocked_connection_timeout = 2
            params.connection_attempts = 1
            connection = pika.BlockingConnection(params)
            connection.channel().queue_declare("__MARKER__", durable=True)
            connection.close()
            reached.append(host)
        except Exception as error:
            reached.append(f"{host}: {type(error).__name__}")
    raise RuntimeError(f"reached {reached}")
