"""srun's end of a step's I/O (wire format: corral.stepio): a listener the agents connect to, output
copied to srun's stdout and stderr, srun's stdin and signals sent to the agents, each task's exit
collected. The sockets and threads are here; what they learn is kept by corral.slurm.srun.step_book.

srun starts in milliseconds, so this imports only the standard library's socket, selectors, threading
and os: no asyncio, no json, no secrets, no pydantic."""
from __future__ import annotations

import os
import selectors
import socket
import sys
import threading
import time
from collections import deque

from corral.slurm.srun.step_book import StepBook, StepNode
from corral.slurm.srun.step_output import StepOutput
from corral.stepio import CHUNK, HELLO_TIMEOUT_S, MAX_HELLO, ProtocolError, parse_hello, parse_input


class StepStreams:
    """Build it, then `start()` it (that opens the listener: its `host`, `port` and `token` go into the
    step request), call `expect()` with the step's layout once the controller created the step, then
    `wait()`; `close()` at the end. Every method is thread-safe; one background thread does all socket
    I/O and one more reads stdin.

    `input` is srun's --input ("all", "none" or a rank as text); `stdin` a binary file (or None: nothing
    is sent, the tasks get end of file at once). `stdout`/`stderr` are binary files (default: srun's own);
    `label` is srun's -l (see StepOutput). `advertise_host` is the address agents should connect to; by
    default the bound address, or this host's name when bound to every interface.
    """

    def __init__(self, *, host: str = "0.0.0.0", port: int = 0, advertise_host: str | None = None,
                 token: str | None = None, label: bool = False, input: str = "all", stdin=None,
                 stdout=None, stderr=None) -> None:
        self.token = token if token is not None else os.urandom(16).hex()
        output = StepOutput(stdout if stdout is not None else sys.stdout.buffer,
                            stderr if stderr is not None else sys.stderr.buffer, label)
        self._book = StepBook(self.token, parse_input(input), output)
        self._lock = self._book.lock
        self._stdin = stdin
        self._bind = (host, port)
        self._advertise_host = advertise_host
        self.host: str | None = None
        self.port: int | None = None
        self._by_sock: dict[socket.socket, StepNode] = {}
        self._sock_of: dict[str, socket.socket] = {}  # node name -> its connection
        self._hellos: dict[socket.socket, tuple[bytearray, float]] = {}  # not yet identified
        self._signals: deque[int] = deque()  # from signal(), for the I/O thread to queue per node
        self._windows: deque[tuple[int, int]] = deque()  # from resize(), likewise
        self._listener: socket.socket | None = None
        self._wake_r = self._wake_w = -1
        self._selector: selectors.BaseSelector | None = None
        self._thread: threading.Thread | None = None
        self._stdin_thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> StepStreams:
        """Open the listener and start the I/O thread."""
        host, port = self._bind
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, port))
            listener.listen(128)
            listener.setblocking(False)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        bound, self.port = listener.getsockname()[:2]
        if self._advertise_host is not None:
            self.host = self._advertise_host
        else:
            self.host = socket.gethostname() if bound in ("0.0.0.0", "::") else bound
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._io_loop, name="step-io", daemon=True)
        self._thread.start()
        return self

    # -- the public side

    def expect(self, nodes: dict[str, list[int]]) -> None:
        """The step's layout: node name -> its ranks. Starts forwarding stdin."""
        with self._lock:
            self._book.expect(nodes)
            self._wake()
        if self._stdin_thread is None and self._book.input_rank is not None:
            self._stdin_thread = threading.Thread(target=self._forward_stdin, name="step-stdin", daemon=True)
            self._stdin_thread.start()

    def signal(self, signum: int) -> None:
        """Send `signum` to the step's tasks on every node that is not done (queued for a node that has
        not connected yet). Takes no lock: safe to call from a signal handler."""
        self._signals.append(int(signum))  # deque.append is atomic; the I/O thread hands it out
        if threading.current_thread() is threading.main_thread():
            self._wake()  # maybe in a handler that interrupted the lock's holder: no lock here
        else:
            with self._lock:
                self._wake()

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's new window size, for task 0's pseudo-terminal (srun --pty). Takes no lock: safe
        to call from a SIGWINCH handler."""
        self._windows.append((rows, cols))
        if threading.current_thread() is threading.main_thread():
            self._wake()
        else:
            with self._lock:
                self._wake()

    def wait(self, timeout: float | None = None) -> bool:
        """Until every expected node is done (all its output copied): True, or False on timeout."""
        return self._book.wait(timeout)

    def fail(self, node: str, text: str) -> None:
        """Count `node` as failed (srun's fallback, e.g. the controller says it ended and it never
        connected): it stops counting for `wait()`, and its connection, if any, is closed."""
        with self._lock:
            self._book.fail(node, text)
            self._wake()  # the I/O thread closes its socket

    @property
    def exits(self) -> dict[int, tuple[int, int]]:
        """rank -> (exit_code, signal) of every task whose exit arrived."""
        with self._lock:
            return dict(self._book.exits)

    @property
    def failures(self) -> dict[str, str]:
        """node -> why it failed (its tasks could not start, or its connection was lost)."""
        with self._lock:
            return dict(self._book.failures)

    @property
    def connected(self) -> list[str]:
        """Nodes whose agent connected (and identified itself)."""
        return self._book.connected()

    @property
    def pending(self) -> list[str]:
        """Expected nodes that are not done yet."""
        return self._book.pending()

    def close(self) -> None:
        """Stop the I/O thread, close every connection and the listener, print leftover labelled lines."""
        with self._lock:
            if self._closed:
                return
            self._book.close()
            self._wake()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._closed = True
            socks = list(self._by_sock) + list(self._hellos)
            self._by_sock.clear()
            self._sock_of.clear()
            self._hellos.clear()
            # Whoever wakes the loop from now on finds no pipe (never a reused descriptor number).
            wake_w, self._wake_w = self._wake_w, -1
        for sock in socks:
            sock.close()
        if self._selector is not None:
            self._selector.close()
            self._listener.close()
            os.close(self._wake_r)
            os.close(wake_w)
        self._book.output.end_all()

    def __enter__(self) -> StepStreams:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _wake(self) -> None:
        """Wake the I/O thread. Called with the lock held, or from signal() in the main thread (where
        close() runs too, so never while close() swaps the descriptor out)."""
        fd = self._wake_w
        if fd < 0:
            return
        try:
            os.write(fd, b"\0")
        except OSError:
            pass  # the pipe is full: a wake-up is pending anyway

    # -- the I/O thread

    def _io_loop(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a bug here must not leave srun waiting for ever
            self._book.abort(f"srun I/O error: {type(exc).__name__}: {exc}")
            raise

    def _serve(self) -> None:
        interest: dict[socket.socket, int] = {}
        while True:
            with self._lock:
                if self._book.closing:
                    return
                self._close_done_nodes(interest)
                while self._signals:
                    self._book.queue_signal(self._signals.popleft())
                while self._windows:
                    self._book.queue_window(*self._windows.popleft())
                self._update_interest(interest)
                timeout = self._hello_timeout()
            for node, data in self._book.take_early():
                self._book.received(node, data)
            for key, events in self._selector.select(timeout):
                self._ready(key.fileobj, events, interest)
            self._expire_hellos(interest)

    def _ready(self, target, events: int, interest: dict[socket.socket, int]) -> None:
        if target is self._listener:
            self._accept(interest)
        elif target == self._wake_r:
            self._drain_wake()
        elif target in self._hellos:
            self._read_hello(target, interest)
        else:
            node = self._by_sock.get(target)
            if node is None:
                return
            if events & selectors.EVENT_WRITE:
                self._send(node, target)
            if events & selectors.EVENT_READ and self._sock_of.get(node.name) is target:
                self._receive(node, target)

    def _update_interest(self, interest: dict[socket.socket, int]) -> None:
        """(Lock held.) Read once the layout is known (labels' width depends on it); write what is queued."""
        for name, sock in self._sock_of.items():
            node = self._book.nodes[name]
            wanted = ((selectors.EVENT_READ if self._book.expected else 0)
                      | (selectors.EVENT_WRITE if node.has_output() else 0))
            current = interest.get(sock, 0)
            if wanted != current:
                if not current:
                    self._selector.register(sock, wanted)
                elif not wanted:
                    self._selector.unregister(sock)
                else:
                    self._selector.modify(sock, wanted)
                interest[sock] = wanted

    def _close_done_nodes(self, interest: dict[socket.socket, int]) -> None:
        """(Lock held.) Close the sockets of done nodes and forget what was queued for them."""
        for name, sock in list(self._sock_of.items()):
            if self._book.nodes[name].done:
                del self._sock_of[name]
                self._by_sock.pop(sock, None)
                if interest.pop(sock, 0):
                    self._selector.unregister(sock)
                sock.close()
        self._book.drop_done_output()

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _accept(self, interest: dict[socket.socket, int]) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # e.g. out of file descriptors: the agent retries
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._hellos[sock] = (bytearray(), time.monotonic() + HELLO_TIMEOUT_S)
            self._selector.register(sock, selectors.EVENT_READ)
            interest[sock] = selectors.EVENT_READ

    def _hello_timeout(self) -> float | None:
        if not self._hellos:
            return None
        soonest = min(deadline for _, deadline in self._hellos.values())
        return max(0.0, soonest - time.monotonic())

    def _expire_hellos(self, interest: dict[socket.socket, int]) -> None:
        now = time.monotonic()
        for sock, (_, deadline) in list(self._hellos.items()):
            if deadline <= now:
                self._drop(sock, interest)

    def _drop(self, sock: socket.socket, interest: dict[socket.socket, int]) -> None:
        with self._lock:
            self._hellos.pop(sock, None)
            self._by_sock.pop(sock, None)
        if interest.pop(sock, 0):
            self._selector.unregister(sock)
        sock.close()

    def _read_hello(self, sock: socket.socket, interest: dict[socket.socket, int]) -> None:
        data = _recv(sock)
        if data is None:
            return
        if not data:
            self._drop(sock, interest)
            return
        buffer, _ = self._hellos[sock]
        buffer += data
        newline = buffer.find(b"\n")
        if newline < 0:
            if len(buffer) > MAX_HELLO:
                self._drop(sock, interest)
            return
        try:
            token, name, ranks = parse_hello(bytes(buffer[:newline]))
        except ProtocolError:
            self._drop(sock, interest)
            return
        with self._lock:
            node = self._book.identify(token, name, ranks)
            if node is not None:
                del self._hellos[sock]
                self._sock_of[name] = sock
                self._by_sock[sock] = node
                node.early = bytes(buffer[newline + 1:])  # handled by the loop once expect() was called
        if node is None:
            self._drop(sock, interest)

    def _receive(self, node: StepNode, sock: socket.socket) -> None:
        data = _recv(sock)
        if data is None:
            return
        if not data:
            self._book.connection_ended(node)  # its socket is closed on the next turn of the loop
            return
        self._book.received(node, data)

    def _send(self, node: StepNode, sock: socket.socket) -> None:
        while node.sending or self._book.next_to_send(node):
            try:
                sent = sock.send(node.sending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # The agent is gone; what it sent before is read (and the node ended) through EVENT_READ.
                self._book.drop_output(node)
                return
            node.sending = node.sending[sent:]

    # -- stdin

    def _forward_stdin(self) -> None:
        """Read srun's stdin and queue it for the nodes that take it; end of file closes their stdin."""
        targets = self._book.stdin_targets()
        if not targets:
            return
        stream = self._stdin
        while stream is not None:
            try:
                data = _read_chunk(stream)
            except (OSError, ValueError):
                data = b""
            if not data:
                break
            with self._lock:
                queued = self._book.queue_stdin(targets, data)
                self._wake()
            if not queued or not self._book.wait_for_room(targets):
                return
        with self._lock:
            self._book.close_stdin(targets)
            self._wake()


def _recv(sock: socket.socket) -> bytes | None:
    """What a ready socket has: None if nothing after all, b"" when the peer closed or the connection broke."""
    try:
        return sock.recv(CHUNK)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def _read_chunk(stream) -> bytes:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is not None:
        return os.read(fd, CHUNK)
    read1 = getattr(stream, "read1", None)
    return read1(CHUNK) if read1 is not None else stream.read(CHUNK)
