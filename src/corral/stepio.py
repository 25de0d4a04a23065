"""Job-step I/O between srun and the node agents: the wire protocol, and srun's end of it.

srun listens on a TCP port and gives its address and a random token to the controller with the step
request; each step node's agent connects back once (one connection per node, before it starts the node's
tasks), streams the tasks' output and exits over it, and receives srun's stdin and signals through it.

Wire format (everything after the hello line is binary frames, both ways):

- hello, agent -> srun, once: one JSON line `{"token": "...", "node": "n1", "ranks": [0, 1]}\\n`
  (at most 64 KiB). A connection with the wrong token, or a second connection for a node, is closed
  without a word. srun does not answer the hello.
- frame: 1 byte type, 4-byte big-endian rank, 4-byte big-endian payload length, payload (at most 16 MiB).
  agent -> srun:
    `o` stdout bytes of task `rank`          `e` stderr bytes of task `rank`
    `x` task `rank` ended: payload JSON `{"exit_code": n, "signal": s}` (as protocol.TaskExit: a signal
        death is exit_code 0 and the signal). The agent sends it only after the task's stdout and stderr
        reached end of file, so a task's output always comes before its exit.
    `f` the node's tasks could not be started (rank ALL_RANKS, payload = the error text, UTF-8). The agent
        sends the ranks' `x` frames (exit codes 127/126/1) before it.
  srun -> agent:
    `i` stdin bytes for task `rank` (ALL_RANKS: every task of the node that takes stdin)
    `c` stdin closed (end of file) for task `rank` (or ALL_RANKS)
    `k` send a signal to the step's tasks on the node (rank ALL_RANKS, payload = the number as text)
- end: the agent closes the connection after its last `x` (or `f`). A node is done when its connection
  ends; if some of its ranks have no exit by then (and no `f` came), the node failed with
  "connection lost". srun closing the connection while tasks run makes the agent kill them.

srun starts in milliseconds, so this module imports only the standard library's socket, selectors,
struct, threading and os (and corral.slurm.jsontext, which imports nothing): no asyncio, no json, no
secrets, no pydantic. The agent's end is corral.agent.step_runner, which uses the helpers here.
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import sys
import threading
import time
from collections import deque

from corral.jobref import ascii_number
from corral.slurm import jsontext

try:  # what hmac.compare_digest is, without importing hmac (and _hashlib)
    from _operator import _compare_digest as _same_token
except ImportError:  # pragma: no cover - CPython always has it
    from hmac import compare_digest as _same_token

HEADER = struct.Struct(">cII")  # type, rank, payload length
ALL_RANKS = 0xFFFFFFFF
MAX_PAYLOAD = 16 << 20
MAX_HELLO = 64 << 10
HELLO_TIMEOUT_S = 10.0
CHUNK = 64 << 10

STDOUT = b"o"
STDERR = b"e"
EXIT = b"x"
FAILED = b"f"
STDIN = b"i"
STDIN_CLOSED = b"c"
SIGNAL = b"k"

# srun stops reading its stdin while a node has this much of it queued and unsent.
STDIN_HIGH_WATER = 1 << 20
CONNECTION_LOST = "connection lost"


class ProtocolError(ValueError):
    pass


def frame(kind: bytes, rank: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(kind, rank & 0xFFFFFFFF, len(payload)) + payload


def hello(token: str, node: str, ranks: list[int]) -> bytes:
    return (jsontext.dumps({"token": token, "node": node, "ranks": list(ranks)}) + "\n").encode()


def exit_payload(exit_code: int, signal: int = 0) -> bytes:
    return jsontext.dumps({"exit_code": exit_code, "signal": signal}).encode()


def parse_exit(payload: bytes) -> tuple[int, int]:
    value = jsontext.loads(payload)
    if not isinstance(value, dict):
        raise ProtocolError("exit frame payload is not a JSON object")
    return int(value.get("exit_code", 0)), int(value.get("signal", 0))


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, get whole frames (type, rank, payload) back."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, int, bytes]]:
        self._buffer += data
        frames: list[tuple[bytes, int, bytes]] = []
        buffer = self._buffer
        start = 0
        while len(buffer) - start >= HEADER.size:
            kind, rank, length = HEADER.unpack_from(buffer, start)
            if length > MAX_PAYLOAD:
                raise ProtocolError(f"frame payload of {length} bytes exceeds {MAX_PAYLOAD}")
            end = start + HEADER.size + length
            if len(buffer) < end:
                break
            frames.append((kind, rank, bytes(buffer[start + HEADER.size:end])))
            start = end
        del buffer[:start]
        return frames

    @property
    def pending(self) -> int:
        return len(self._buffer)


def parse_input(mode: str) -> int | None:
    """srun's --input as the rank it selects: ALL_RANKS for "all", None for "none", else the rank."""
    if mode == "all":
        return ALL_RANKS
    if mode == "none":
        return None
    rank = ascii_number(mode)  # int() would read "1_0" as 10
    if rank is None:
        raise ValueError(f"invalid input rank {mode!r}")
    return rank


class _Node:
    """One step node as srun sees it: what is queued for it, and how far it got."""

    __slots__ = ("name", "ranks", "expected", "sock", "decoder", "urgent", "queued", "queued_bytes",
                 "sending", "connected", "done", "failed_frame", "exited", "early")

    def __init__(self, name: str, ranks: list[int]) -> None:
        self.name = name
        self.ranks = list(ranks)
        self.expected = False
        self.sock: socket.socket | None = None
        self.decoder = FrameDecoder()
        self.urgent: deque[bytes] = deque()  # signal frames: sent before queued stdin
        self.queued: deque[bytes] = deque()  # stdin frames
        self.queued_bytes = 0
        self.sending = memoryview(b"")  # the frame being written now (never interleaved)
        self.connected = False
        self.done = False
        self.failed_frame = False
        self.exited: set[int] = set()
        self.early = b""  # frames that came with the hello, before expect()

    def has_output(self) -> bool:
        return bool(self.sending) or bool(self.urgent) or bool(self.queued)


class StepStreams:
    """srun's end of a step's I/O: a listener the agents connect to, output copied to srun's stdout and
    stderr, srun's stdin and signals sent to the agents, each task's exit collected.

    Create it before asking for the step (its `host`, `port` and `token` go into the request), call
    `expect()` with the step's layout once the controller created the step, then `wait()`. Every method
    is thread-safe; one background thread does all socket I/O and one more reads stdin.

    `input` is srun's --input ("all", "none" or a rank as text); `stdin` a binary file (or None: nothing
    is sent, the tasks get end of file at once). `stdout`/`stderr` are binary files (default: srun's own);
    `label` is srun's -l: every line is prefixed with `<rank>: `, ranks right-aligned to the width of the
    largest one, and a last line without a newline gets one, as Slurm's srun prints them.
    `advertise_host` is the address agents should connect to; by default the bound address, or this
    host's name when bound to every interface.
    """

    def __init__(
        self,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        advertise_host: str | None = None,
        token: str | None = None,
        label: bool = False,
        input: str = "all",
        stdin=None,
        stdout=None,
        stderr=None,
    ) -> None:
        self.token = token if token is not None else os.urandom(16).hex()
        self._input_rank = parse_input(input)
        self._stdin = stdin
        self._streams = {
            STDOUT: stdout if stdout is not None else sys.stdout.buffer,
            STDERR: stderr if stderr is not None else sys.stderr.buffer,
        }
        self._broken: set[bytes] = set()  # streams that failed (a closed pipe): further output dropped
        self._label = label
        self._label_width = 1
        self._partial: dict[tuple[bytes, int], bytes] = {}  # (stream, rank) -> unfinished line

        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._nodes: dict[str, _Node] = {}
        self._by_sock: dict[socket.socket, _Node] = {}
        self._hellos: dict[socket.socket, tuple[bytearray, float]] = {}  # not yet identified
        self._exits: dict[int, tuple[int, int]] = {}
        self._failures: dict[str, str] = {}
        self._expected = False
        self._signals: deque[int] = deque()  # from signal(), for the I/O thread to queue per node
        self._closing = False
        self._closed = False

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(128)
            self._listener.setblocking(False)
        except OSError:
            self._listener.close()
            raise
        self.port: int = self._listener.getsockname()[1]
        bound = self._listener.getsockname()[0]
        if advertise_host is not None:
            self.host = advertise_host
        elif bound in ("0.0.0.0", "::"):
            self.host = socket.gethostname()
        else:
            self.host = bound

        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._io_loop, name="step-io", daemon=True)
        self._thread.start()
        self._stdin_thread: threading.Thread | None = None

    # -- the public side

    def expect(self, nodes: dict[str, list[int]]) -> None:
        """The step's layout: node name -> its ranks. Starts forwarding stdin."""
        with self._lock:
            for name, ranks in nodes.items():
                node = self._nodes.get(name)
                if node is None:
                    node = self._nodes[name] = _Node(name, ranks)
                else:
                    node.ranks = list(ranks)
                node.expected = True
            total = sum(len(r) for r in nodes.values())
            largest = max((max(r) for r in nodes.values() if r), default=0)
            self._label_width = len(str(max(total - 1, largest, 0)))
            self._expected = True
            self._changed.notify_all()
            self._wake()
        if self._stdin_thread is None and self._input_rank is not None:
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

    def wait(self, timeout: float | None = None) -> bool:
        """Until every expected node is done (all its output copied): True, or False on timeout."""
        with self._lock:
            return self._changed.wait_for(self._all_done, timeout)

    def fail(self, node: str, text: str) -> None:
        """Count `node` as failed (srun's fallback, e.g. the controller says it ended and it never
        connected): it stops counting for `wait()`, and its connection, if any, is closed."""
        with self._lock:
            entry = self._nodes.get(node)
            if entry is None:
                entry = self._nodes[node] = _Node(node, [])
            if entry.done:
                return
            self._failures.setdefault(node, text)
            entry.done = True  # the I/O thread closes its socket
            self._changed.notify_all()
            self._wake()

    @property
    def exits(self) -> dict[int, tuple[int, int]]:
        """rank -> (exit_code, signal) of every task whose exit arrived."""
        with self._lock:
            return dict(self._exits)

    @property
    def failures(self) -> dict[str, str]:
        """node -> why it failed (its tasks could not start, or its connection was lost)."""
        with self._lock:
            return dict(self._failures)

    @property
    def connected(self) -> list[str]:
        """Nodes whose agent connected (and identified itself)."""
        with self._lock:
            return sorted(n.name for n in self._nodes.values() if n.connected)

    @property
    def pending(self) -> list[str]:
        """Expected nodes that are not done yet."""
        with self._lock:
            return sorted(n.name for n in self._nodes.values() if n.expected and not n.done)

    def close(self) -> None:
        """Stop the I/O thread, close every connection and the listener, print leftover labelled lines."""
        with self._lock:
            if self._closed:
                return
            self._closing = True
            self._changed.notify_all()
            self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            self._closed = True
            socks = list(self._by_sock) + list(self._hellos)
            self._by_sock.clear()
            self._hellos.clear()
            # Whoever wakes the loop from now on finds no pipe (never a reused descriptor number).
            wake_w, self._wake_w = self._wake_w, -1
        for sock in socks:
            sock.close()
        self._selector.close()
        self._listener.close()
        os.close(self._wake_r)
        os.close(wake_w)
        for stream, rank in list(self._partial):
            self._flush_partial(stream, rank)

    def __enter__(self) -> StepStreams:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inside the lock

    def _all_done(self) -> bool:
        if self._closing:
            return True
        return self._expected and all(n.done for n in self._nodes.values() if n.expected)

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
            with self._lock:
                for node in self._nodes.values():
                    if not node.done:
                        self._failures.setdefault(node.name, f"srun I/O error: {type(exc).__name__}: {exc}")
                        node.done = True
                self._changed.notify_all()
            raise

    def _serve(self) -> None:
        interest: dict[socket.socket, int] = {}
        while True:
            with self._lock:
                if self._closing:
                    return
                self._close_done_nodes(interest)
                while self._signals:
                    data = frame(SIGNAL, ALL_RANKS, str(self._signals.popleft()).encode())
                    for node in self._nodes.values():
                        if not node.done:
                            node.urgent.append(data)
                early = [n for n in self._nodes.values() if n.early and self._expected]
                for node in self._nodes.values():
                    if node.sock is None:
                        continue
                    # Output waits until expect(): the labels' width depends on the step's size.
                    wanted = ((selectors.EVENT_READ if self._expected else 0)
                              | (selectors.EVENT_WRITE if node.has_output() else 0))
                    current = interest.get(node.sock, 0)
                    if wanted != current:
                        if not current:
                            self._selector.register(node.sock, wanted)
                        elif not wanted:
                            self._selector.unregister(node.sock)
                        else:
                            self._selector.modify(node.sock, wanted)
                        interest[node.sock] = wanted
                timeout = self._hello_timeout()
            for node in early:
                data, node.early = node.early, b""
                self._handle_frames(node, data)
            for key, events in self._selector.select(timeout):
                target = key.fileobj
                if target is self._listener:
                    self._accept(interest)
                elif target == self._wake_r:
                    self._drain_wake()
                elif target in self._hellos:
                    self._read_hello(target, interest)
                else:
                    node = self._by_sock.get(target)
                    if node is None:
                        continue
                    if events & selectors.EVENT_WRITE:
                        self._send(node)
                    if events & selectors.EVENT_READ and node.sock is not None:
                        self._receive(node)
            self._expire_hellos(interest)

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
            message = jsontext.loads(bytes(buffer[:newline]))
            token, name, ranks = message["token"], message["node"], [int(r) for r in message["ranks"]]
            if not isinstance(token, str) or not isinstance(name, str):
                raise TypeError("bad hello")
        except (ValueError, KeyError, TypeError):
            self._drop(sock, interest)
            return
        rest = bytes(buffer[newline + 1:])
        with self._lock:
            node = self._nodes.get(name)
            if not _same_token(token.encode(), self.token.encode()) or (
                    node is not None and (node.connected or node.done)):
                node = None
            elif node is None:
                node = self._nodes[name] = _Node(name, ranks)
            elif not node.ranks:
                node.ranks = ranks
            if node is not None:
                del self._hellos[sock]
                node.sock = sock
                node.connected = True
                self._by_sock[sock] = node
                self._changed.notify_all()
        if node is None:
            self._drop(sock, interest)
            return
        if rest:
            node.early = rest  # handled by the loop once expect() was called

    def _receive(self, node: _Node) -> None:
        sock = node.sock
        assert sock is not None
        data = _recv(sock)
        if data is None:
            return
        if not data:
            self._connection_ended(node)
            return
        self._handle_frames(node, data)

    def _handle_frames(self, node: _Node, data: bytes) -> None:
        try:
            frames = node.decoder.feed(data)
        except ProtocolError as exc:
            self._connection_ended(node, f"protocol error: {exc}")
            return
        for kind, rank, payload in frames:
            if kind in (STDOUT, STDERR):
                self._emit(kind, rank, payload)
            elif kind == EXIT:
                try:
                    result = parse_exit(payload)
                except (ValueError, TypeError) as exc:
                    self._connection_ended(node, f"protocol error: {exc}")
                    return
                self._flush_partial(STDOUT, rank)
                self._flush_partial(STDERR, rank)
                with self._lock:
                    self._exits[rank] = result
                    node.exited.add(rank)
                    self._changed.notify_all()
            elif kind == FAILED:
                with self._lock:
                    self._failures.setdefault(node.name, payload.decode("utf-8", "replace"))
                    node.failed_frame = True
                    self._changed.notify_all()
            # Unknown frame types are skipped: a newer agent may send more than this srun knows.

    def _connection_ended(self, node: _Node, reason: str = CONNECTION_LOST) -> None:
        """The node's connection is over: it is done, failed if some of its ranks never exited."""
        for rank in node.ranks:
            self._flush_partial(STDOUT, rank)
            self._flush_partial(STDERR, rank)
        with self._lock:
            missing = [r for r in node.ranks if r not in node.exited]
            if (missing or reason != CONNECTION_LOST) and not node.failed_frame:
                self._failures.setdefault(node.name, reason)
            node.done = True
            self._changed.notify_all()
        # The socket itself is closed by _close_done_nodes on the next turn of the loop.

    def _close_done_nodes(self, interest: dict[socket.socket, int]) -> None:
        """(Lock held.) Close the sockets of done nodes and forget what was queued for them."""
        for node in self._nodes.values():
            if node.done and node.sock is not None:
                sock, node.sock = node.sock, None
                self._by_sock.pop(sock, None)
                if interest.pop(sock, 0):
                    self._selector.unregister(sock)
                sock.close()
            if node.done and node.has_output():
                node.urgent.clear()
                node.queued.clear()
                node.queued_bytes = 0
                node.sending = memoryview(b"")
                self._changed.notify_all()  # the stdin thread may wait for room

    def _send(self, node: _Node) -> None:
        sock = node.sock
        assert sock is not None
        while True:
            if not node.sending:
                with self._lock:
                    if node.urgent:
                        node.sending = memoryview(node.urgent.popleft())
                    elif node.queued:
                        data = node.queued.popleft()
                        node.queued_bytes -= len(data)
                        node.sending = memoryview(data)
                        self._changed.notify_all()
                    else:
                        return
            try:
                sent = sock.send(node.sending)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                # The agent is gone; what it sent before is read (and the node ended) through EVENT_READ.
                node.sending = memoryview(b"")
                with self._lock:
                    node.urgent.clear()
                    node.queued.clear()
                    node.queued_bytes = 0
                    self._changed.notify_all()
                return
            node.sending = node.sending[sent:]

    # -- output

    def _emit(self, kind: bytes, rank: int, data: bytes) -> None:
        if not self._label:
            self._write(kind, data)
            return
        key = (kind, rank)
        text = self._partial.pop(key, b"") + data
        last_newline = text.rfind(b"\n")
        if last_newline < 0:
            self._partial[key] = text
            return
        complete, rest = text[:last_newline + 1], text[last_newline + 1:]
        if rest:
            self._partial[key] = rest
        prefix = self._prefix(rank)
        self._write(kind, b"".join(prefix + line for line in complete.splitlines(keepends=True)))

    def _prefix(self, rank: int) -> bytes:
        return f"{rank:>{self._label_width}}: ".encode()

    def _flush_partial(self, kind: bytes, rank: int) -> None:
        rest = self._partial.pop((kind, rank), None)
        if rest:
            self._write(kind, self._prefix(rank) + rest + b"\n")

    def _write(self, kind: bytes, data: bytes) -> None:
        if kind in self._broken or not data:
            return
        stream = self._streams[kind]
        try:
            stream.write(data)
            stream.flush()
        except (OSError, ValueError):
            self._broken.add(kind)  # e.g. srun | head: the reader went away; keep collecting exits

    # -- stdin

    def _forward_stdin(self) -> None:
        """Read srun's stdin and queue it for the nodes that take it; end of file closes their stdin."""
        target_rank = self._input_rank
        assert target_rank is not None
        with self._lock:
            if target_rank == ALL_RANKS:
                targets = [n for n in self._nodes.values() if n.expected]
            else:
                targets = [n for n in self._nodes.values() if n.expected and target_rank in n.ranks]
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
            for start in range(0, len(data), MAX_PAYLOAD):
                message = frame(STDIN, target_rank, data[start:start + MAX_PAYLOAD])
                with self._lock:
                    live = [n for n in targets if not n.done]
                    if not live or self._closing:
                        return
                    for node in live:
                        node.queued.append(message)
                        node.queued_bytes += len(message)
                    self._wake()
            with self._lock:
                # Backpressure: stop reading while a live node has a lot queued.
                self._changed.wait_for(lambda: self._closing or all(
                    n.done or n.queued_bytes < STDIN_HIGH_WATER for n in targets))
                if self._closing:
                    return
        closed = frame(STDIN_CLOSED, target_rank)
        with self._lock:
            for node in targets:
                if not node.done:
                    node.queued.append(closed)
                    node.queued_bytes += len(closed)
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
