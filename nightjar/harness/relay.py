"""Network for a sandbox: a namespace of its own per trial, and a relay from it to the grading broker.

A sandboxed worker runs in a network namespace holding only a loopback
interface: no address of this machine, of its network or of the internet
answers there. One thing does: 127.0.0.1:5672, where the relay listens (in
that namespace) and passes each connection on to the grading broker (from
the grader's own network). So a worker reaches exactly one broker, with the
credentials of its own vhost, and nothing else.

The relay is a process of its own (run as `python3 relay.py HOST PORT`; it
imports nothing from the project), so copying bytes never waits for the
grader's threads. The grader hands it each trial's listening socket over a
control socket and asks it to close a trial's connections after each worker
run: it closes them all and answers once RabbitMQ has ended each one, so a
delivery the trial left unacknowledged is back in its queue before the
grader looks.
"""

import ctypes
import fcntl
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
AMQP_PORT = 5672
CHUNK = 65536
SEND_WAIT = 5.0   # a peer that stops reading holds up its own sandbox this long at most
CLOSE_WAIT = 3.0  # how long RabbitMQ may take to end a closed connection
PR_SET_PDEATHSIG = 1
PRIORITY = -10  # the relay's nice value


class Namespaces:
    """A new network and IPC namespace (made in a thread of its own) with a listener inside.

    net_fd and ipc_fd are open descriptors of the namespaces (they keep them
    alive; nsenter --net=/proc/self/fd/N joins them); listener is a socket
    listening on 127.0.0.1:5672 inside.
    """

    def __init__(self):
        made = {}

        def make():
            libc = ctypes.CDLL(None, use_errno=True)
            try:
                if libc.unshare(CLONE_NEWNET | CLONE_NEWIPC) != 0:
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
    """The grader's side: starts the relay process and tells it what to do."""

    def __init__(self, host, port):
        self._control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-S", __file__, host, str(port), str(os.getpid())],
            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
            env={"RELAY_CONTROL": str(theirs.fileno())})
        theirs.close()
        # Every byte of every worker passes through it: on a busy machine it must not
        # wait its turn behind them (unsandboxed, the workers reach the broker directly).
        try:
            os.setpriority(os.PRIO_PROCESS, self.process.pid, PRIORITY)
        except PermissionError:
            pass  # without CAP_SYS_NICE it runs at the usual priority

    def _ask(self, request, fds=()):
        with self._lock:
            socket.send_fds(self._control, [request.encode()], list(fds))
            answer = self._control.recv(256).decode()
        if answer != "ok":
            raise OSError(f"the sandbox's relay did not answer {request!r} ({answer or 'it is gone'})")

    def add_trial(self, key, listener):
        self._ask(f"add {key}", [listener.fileno()])

    def close_trial(self, key):
        """Close the trial's connections; return once RabbitMQ has ended each."""
        self._ask(f"close {key}")

    def remove_trial(self, key, listener):
        self._ask(f"remove {key}")

    def stop(self):
        self._control.close()  # the relay ends when its control socket does
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


# ---- the relay process -----------------------------------------------------------------------


class _Serving:
    def __init__(self, control, upstream):
        self.control, self.upstream = control, upstream
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, ("control", None, None))
        self.pairs = {}      # trial key -> {(inside, broker)}
        self.listeners = {}  # trial key -> listening socket
        self.closing = {}    # trial key -> ({broker sockets still open}, deadline)

    def run(self):
        while True:
            for selected, _ in self.selector.select(timeout=0.2):
                kind, key, peer = selected.data
                if kind == "control":
                    if not self._command():
                        return
                elif kind == "accept":
                    self._accept(selected.fileobj, key)
                elif kind == "closing":
                    self._ending(selected.fileobj, key)
                else:
                    self._pass_on(selected.fileobj, peer, key)
            self._expire()

    def _command(self):
        try:
            message, fds, _, _ = socket.recv_fds(self.control, 256, 1)
        except OSError:
            return False
        if not message:
            return False
        verb, key = message.decode().split(" ", 1)
        if verb == "add":
            listener = socket.socket(fileno=fds[0])
            listener.setblocking(False)
            self.listeners[key] = listener
            self.pairs[key] = set()
            self.selector.register(listener, selectors.EVENT_READ, ("accept", key, None))
        elif verb in ("close", "remove"):
            if verb == "remove" and key in self.listeners:
                self.selector.unregister(self.listeners[key])
                self.listeners.pop(key).close()
            self._close(key)
            if verb == "remove":
                self.pairs.pop(key, None)
            return True  # answered once RabbitMQ has ended the connections (_ending, _expire)
        self.control.send(b"ok")
        return True

    def _close(self, key):
        brokers = set()
        for inside, broker in self.pairs.get(key, set()).copy():
            self._forget(key, inside, broker)
            inside.close()
            try:
                broker.shutdown(socket.SHUT_WR)  # RabbitMQ reads the end and ends the connection
            except OSError:
                broker.close()
                continue
            self.selector.register(broker, selectors.EVENT_READ, ("closing", key, None))
            brokers.add(broker)
        self.closing[key] = (brokers, time.monotonic() + CLOSE_WAIT)
        self._answer_if_closed(key)

    def _ending(self, broker, key):
        try:
            if broker.recv(CHUNK):
                return  # what RabbitMQ still sends before it closes
        except OSError:
            pass
        self.selector.unregister(broker)
        broker.close()
        self.closing[key][0].discard(broker)
        self._answer_if_closed(key)

    def _answer_if_closed(self, key):
        if not self.closing[key][0]:
            del self.closing[key]
            self.control.send(b"ok")

    def _expire(self):
        for key, (brokers, deadline) in list(self.closing.items()):
            if time.monotonic() > deadline:
                for broker in brokers:
                    self.selector.unregister(broker)
                    broker.close()
                brokers.clear()
                self._answer_if_closed(key)

    def _accept(self, listener, key):
        try:
            inside, _ = listener.accept()
        except OSError:
            return
        try:
            broker = socket.create_connection(self.upstream, timeout=5)
        except OSError:
            inside.close()  # the worker sees the broker refuse, as it would without the relay
            return
        for sock in (inside, broker):
            # AMQP's frames are small: Nagle's algorithm would hold each one back ~40 ms.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        self.pairs[key].add((inside, broker))
        self.selector.register(inside, selectors.EVENT_READ, ("data", key, broker))
        self.selector.register(broker, selectors.EVENT_READ, ("data", key, inside))

    def _pass_on(self, source, target, key):
        try:
            data = source.recv(CHUNK)
            if data:
                target.settimeout(SEND_WAIT)
                target.sendall(data)
                target.setblocking(False)
                return
        except OSError:
            pass
        # One side ended (or would not take more): end the pair.
        pair = next((p for p in self.pairs.get(key, ()) if source in p), None)
        if pair is not None:
            self._forget(key, *pair)
            for sock in pair:
                sock.close()

    def _forget(self, key, inside, broker):
        self.pairs[key].discard((inside, broker))
        for sock in (inside, broker):
            try:
                self.selector.unregister(sock)
            except (KeyError, ValueError):
                pass


def main():
    host, port, parent = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # gone with the grader
    if os.getppid() != parent:
        return
    control = socket.socket(fileno=int(os.environ["RELAY_CONTROL"]))
    _Serving(control, (host, port)).run()


if __name__ == "__main__":
    main()
