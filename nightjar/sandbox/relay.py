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

A worker's connection ends through the relay as it would without one: every
byte the worker wrote reaches RabbitMQ before the end of the connection (an
ack sent just before the worker was killed counts, as it does on a direct
connection), then RabbitMQ is told the connection ends and the relay reads
until RabbitMQ has ended it.
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


class _Pair:
    """One relayed connection: the worker's socket, the broker's, and what waits to be sent to each."""

    def __init__(self, key, inside, broker):
        self.key, self.inside, self.broker = key, inside, broker
        self.connected = False
        self.ending = False  # the worker's side ended: the broker's is read until RabbitMQ ends it
        self.waiting = {inside: bytearray(), broker: bytearray()}

    def other(self, sock):
        return self.broker if sock is self.inside else self.inside


class _Serving:
    """The relay process's loop. Nothing in it blocks: a connection that is slow to open, or a
    peer that stops reading, holds up only itself (what it has not read waits, and its other
    side is not read meanwhile)."""

    def __init__(self, control, upstream):
        self.control, self.upstream = control, upstream
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, ("control", None))
        self.pairs = {}      # trial key -> {_Pair}
        self.listeners = {}  # trial key -> listening socket
        self.closing = {}    # trial key -> ({its pairs RabbitMQ has not ended yet}, deadline)

    def run(self):
        while True:
            for selected, mask in self.selector.select(timeout=0.2):
                kind, item = selected.data
                if kind == "control":
                    if not self._command():
                        return
                elif kind == "accept":
                    self._accept(selected.fileobj, item)
                elif kind == "ending":
                    self._ending(item)
                else:
                    self._ready(item, selected.fileobj, mask)
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
            self.selector.register(listener, selectors.EVENT_READ, ("accept", key))
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
        """End every connection of the trial (its workers are gone); answer once RabbitMQ has."""
        for pair in list(self.pairs.get(key, ())):
            if not pair.ending:
                self._hand_over(pair)
        ending = {pair for pair in self.pairs.get(key, ()) if pair.ending}
        self.closing[key] = (ending, time.monotonic() + CLOSE_WAIT)
        self._answer_if_closed(key)

    def _hand_over(self, pair):
        """The worker's side has ended (or its trial is closed): send RabbitMQ every byte the
        worker wrote, then the end of the connection, as the worker's own close would; then
        read the broker's side until RabbitMQ ends it (see _ending)."""
        self._forget(pair)
        try:
            while data := pair.inside.recv(CHUNK):  # all it wrote before it ended
                pair.waiting[pair.broker] += data
        except OSError:
            pass  # nothing more now (BlockingIOError), or its side failed
        pair.inside.close()
        try:
            if not pair.connected:
                raise OSError("never connected")
            if pair.waiting[pair.broker]:
                pair.broker.settimeout(CLOSE_WAIT)
                pair.broker.sendall(pair.waiting[pair.broker])
                pair.broker.setblocking(False)
            pair.broker.shutdown(socket.SHUT_WR)  # RabbitMQ reads the end and ends the connection
        except OSError:
            self._end(pair)
            return
        pair.ending = True
        self.pairs.setdefault(pair.key, set()).add(pair)
        self.selector.register(pair.broker, selectors.EVENT_READ, ("ending", pair))

    def _ending(self, pair):
        try:
            if pair.broker.recv(CHUNK):
                return  # what RabbitMQ still sends before it closes
        except BlockingIOError:
            return
        except OSError:
            pass
        self._end(pair)
        if pair.key in self.closing:
            self.closing[pair.key][0].discard(pair)
            self._answer_if_closed(pair.key)

    def _answer_if_closed(self, key):
        if not self.closing[key][0]:
            del self.closing[key]
            self.control.send(b"ok")

    def _expire(self):
        for key, (ending, deadline) in list(self.closing.items()):
            if time.monotonic() > deadline:
                for pair in ending:
                    self._end(pair)
                ending.clear()
                self._answer_if_closed(key)

    def _accept(self, listener, key):
        try:
            inside, _ = listener.accept()
        except OSError:
            return
        broker = socket.socket(socket.AF_INET if ":" not in self.upstream[0] else socket.AF_INET6)
        for sock in (inside, broker):
            # AMQP's frames are small: Nagle's algorithm would hold each one back ~40 ms.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        pair = _Pair(key, inside, broker)
        self.pairs[key].add(pair)
        try:
            broker.connect(self.upstream)
            pair.connected = True
        except BlockingIOError:
            pass  # under way: the broker's socket turns writable once it is connected
        except OSError:
            self._end(pair)  # the worker sees the broker refuse, as it would without the relay
            return
        self._register(pair)

    def _events(self, pair, sock):
        """What to wait for on one socket: what it may read (not while its other side has bytes
        waiting, nor before the broker answers), and whether it has bytes waiting to be written."""
        if not pair.connected:
            return selectors.EVENT_WRITE if sock is pair.broker else 0
        wanted = 0 if pair.waiting[pair.other(sock)] else selectors.EVENT_READ
        return wanted | (selectors.EVENT_WRITE if pair.waiting[sock] else 0)

    def _ready(self, pair, sock, mask):
        try:
            if not pair.connected:
                error = pair.broker.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if error:
                    raise OSError(error, os.strerror(error))
                pair.connected = True
            elif mask & selectors.EVENT_READ:
                data = sock.recv(CHUNK)
                if not data and sock is pair.inside:
                    self._hand_over(pair)  # the worker ended its connection (or died)
                    return
                if not data:
                    raise OSError("closed")
                pair.waiting[pair.other(sock)] += data
                self._send(pair, pair.other(sock))
            if mask & selectors.EVENT_WRITE and pair.connected:
                self._send(pair, sock)
        except OSError:
            self._end(pair)  # the broker ended it (or a side failed): end the pair
            return
        self._register(pair)

    def _send(self, pair, sock):
        waiting = pair.waiting[sock]
        if waiting:
            try:
                sent = sock.send(waiting)
            except BlockingIOError:
                sent = 0
            del waiting[:sent]

    def _register(self, pair):
        for sock in (pair.inside, pair.broker):
            events = self._events(pair, sock)
            try:
                key = self.selector.get_key(sock)
            except (KeyError, ValueError):
                key = None
            if events and key is None:
                self.selector.register(sock, events, ("data", pair))
            elif events and key.events != events:
                self.selector.modify(sock, events, ("data", pair))
            elif not events and key is not None:
                self.selector.unregister(sock)

    def _end(self, pair):
        self._forget(pair)
        pair.inside.close()
        pair.broker.close()

    def _forget(self, pair):
        self.pairs.get(pair.key, set()).discard(pair)
        for sock in (pair.inside, pair.broker):
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
