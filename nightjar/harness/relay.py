"""Network for a sandbox: a namespace of its own per trial, and a relay from it to the grading broker.

A sandboxed worker runs in a network namespace holding only a loopback
interface: no address of this machine, of its network or of the internet
answers there. One thing does: 127.0.0.1:5672, where the grader's relay
listens (in that namespace) and passes each connection on to the grading
broker (from the grader's own network). So a worker reaches exactly one
broker, with the credentials of its own vhost, and nothing else.

Because every byte passes through it, the relay knows each trial's
connections: close_trial() closes them all and waits until RabbitMQ has
ended each one, so a delivery the trial left unacknowledged is back in its
queue before the grader looks.
"""

import ctypes
import fcntl
import os
import selectors
import socket
import struct
import threading

CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
AMQP_PORT = 5672
CHUNK = 65536
SEND_WAIT = 5.0

_libc = ctypes.CDLL(None, use_errno=True)


class Namespaces:
    """A new network and IPC namespace (made in a thread of its own) with a listener inside.

    net_fd and ipc_fd are open descriptors of the namespaces (they keep them
    alive; nsenter --net=/proc/self/fd/N joins them); listener is a socket
    listening on 127.0.0.1:5672 inside.
    """

    def __init__(self):
        made = {}

        def make():
            try:
                if _libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) != 0:
                    raise OSError(ctypes.get_errno(), "unshare: " + os.strerror(ctypes.get_errno()))
                probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    fcntl.ioctl(probe, SIOCSIFFLAGS,
                                struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
                finally:
                    probe.close()
                listener = socket.socket()
                listener.bind(("127.0.0.1", AMQP_PORT))
                listener.listen(64)
                made["listener"] = listener
                made["net"] = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                made["ipc"] = os.open("/proc/thread-self/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as error:
                made["error"] = error

        # The thread moves into the new namespaces and ends; what it made stays there.
        thread = threading.Thread(target=make)
        thread.start()
        thread.join()
        if "error" in made:
            raise made["error"]
        self.listener, self.net_fd, self.ipc_fd = made["listener"], made["net"], made["ipc"]

    def close(self):
        self.listener.close()
        for fd in (self.net_fd, self.ipc_fd):
            os.close(fd)


class Relay:
    """Copies bytes between the trials' listeners and the broker at (host, port), in one thread."""

    def __init__(self, host, port):
        self.upstream = (host, port)
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._pairs = {}  # trial key -> set of (inside socket, broker socket)
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector.register(self._wake_r, selectors.EVENT_READ, ("wake", None, None))
        self._todo = []
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _call(self, action):
        """Run action() in the relay's thread (the selector belongs to it) and wait for it."""
        done = threading.Event()
        outcome = {}

        def run():
            try:
                outcome["value"] = action()
            except Exception as error:  # handed back to the caller
                outcome["error"] = error
            done.set()

        with self._lock:
            self._todo.append(run)
        self._wake_w.send(b"x")
        done.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("value")

    def add_trial(self, key, listener):
        listener.setblocking(False)
        self._call(lambda: (self._pairs.setdefault(key, set()),
                            self._selector.register(listener, selectors.EVENT_READ,
                                                    ("accept", key, None))))

    def open_connections(self, key):
        return self._call(lambda: len(self._pairs.get(key, ())))

    def close_trial(self, key, timeout=3.0):
        """Close the trial's connections; return once RabbitMQ has closed its end of each."""
        brokers = self._call(lambda: self._drop_inside(key))
        for broker in brokers:
            broker.settimeout(timeout)
            try:
                broker.shutdown(socket.SHUT_WR)  # RabbitMQ reads the end, ends the connection
                while broker.recv(CHUNK):  # and closes its side once it has
                    pass
            except OSError:
                pass
            broker.close()

    def remove_trial(self, key, listener):
        self.close_trial(key)
        self._call(lambda: self._selector.unregister(listener))

    def _drop_inside(self, key):
        brokers = []
        for inside, broker in self._pairs.get(key, set()).copy():
            self._forget(key, inside, broker)
            inside.close()
            broker.setblocking(True)
            brokers.append(broker)
        return brokers

    def _forget(self, key, inside, broker):
        self._pairs[key].discard((inside, broker))
        for sock in (inside, broker):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass

    def stop(self):
        self._stopping = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for key in list(self._pairs):
            for inside, broker in self._pairs[key]:
                inside.close()
                broker.close()
        self._wake_r.close()
        self._wake_w.close()

    def _loop(self):
        while not self._stopping:
            for selected, _ in self._selector.select(timeout=1.0):
                kind, key, peer = selected.data
                if kind == "wake":
                    self._wake_r.recv(CHUNK)
                    with self._lock:
                        todo, self._todo = self._todo, []
                    for run in todo:
                        run()
                elif kind == "accept":
                    self._accept(selected.fileobj, key)
                else:
                    self._pass_on(selected.fileobj, peer, key)

    def _accept(self, listener, key):
        try:
            inside, _ = listener.accept()
        except (BlockingIOError, OSError):
            return
        try:
            broker = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            inside.close()  # the worker sees the broker refuse, as it would without the relay
            return
        inside.setblocking(False)
        broker.setblocking(False)
        self._pairs[key].add((inside, broker))
        self._selector.register(inside, selectors.EVENT_READ, ("data", key, broker))
        self._selector.register(broker, selectors.EVENT_READ, ("data", key, inside))

    def _pass_on(self, source, target, key):
        try:
            data = source.recv(CHUNK)
            if data:
                # A peer that stops reading holds up only its own sandbox, and
                # not for long: the pair is ended after SEND_WAIT.
                target.settimeout(SEND_WAIT)
                target.sendall(data)
                target.setblocking(False)
                return
        except OSError:
            pass
        # One side ended: end the pair.
        pair = next((p for p in self._pairs.get(key, ()) if source in p), None)
        if pair is not None:
            self._forget(key, *pair)
            for sock in pair:
                sock.close()
