"""srun's bookkeeping of a step's I/O, without sockets: which nodes said hello, which tasks' exits
arrived, what is queued for each node (signals, stdin), and when the step is done. The socket and thread
shell over it is corral.slurm.srun.step_streams.StepStreams."""
from __future__ import annotations

import threading
from collections import deque

from corral.slurm.srun.step_output import StepOutput
from corral.stepio import (
    ALL_RANKS,
    CONNECTION_LOST,
    EXIT,
    FAILED,
    MAX_PAYLOAD,
    SIGNAL,
    STDERR,
    STDIN,
    STDIN_CLOSED,
    STDOUT,
    WINDOW,
    FrameDecoder,
    ProtocolError,
    frame,
    parse_exit,
    same_token,
    window_payload,
)

# srun stops reading its stdin while a node has this much of it queued and unsent.
STDIN_HIGH_WATER = 1 << 20


class StepNode:
    """One step node as srun sees it: what is queued for it, and how far it got."""

    __slots__ = ("name", "ranks", "expected", "decoder", "urgent", "queued", "queued_bytes", "sending",
                 "connected", "done", "failed_frame", "exited", "early")

    def __init__(self, name: str, ranks: list[int]) -> None:
        self.name = name
        self.ranks = list(ranks)
        self.expected = False
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

    def drop_output(self) -> None:
        self.urgent.clear()
        self.queued.clear()
        self.queued_bytes = 0
        self.sending = memoryview(b"")


class StepBook:
    """What srun knows of a step's nodes. Thread-safe: every method takes `lock` (re-entrant, so a caller
    may hold it around several calls), except that a node's frames are decoded and their output written
    outside it by the one thread that reads the connections, so that a slow stdout never blocks the
    others; what a task printed is written before its exit is recorded."""

    def __init__(self, token: str, input_rank: int | None, output: StepOutput) -> None:
        self.token = token
        self.input_rank = input_rank  # srun's --input: ALL_RANKS, a rank, or None
        self.output = output
        self.lock = threading.Condition(threading.RLock())
        self.nodes: dict[str, StepNode] = {}
        self.exits: dict[int, tuple[int, int]] = {}
        self.failures: dict[str, str] = {}
        self.expected = False
        self.closing = False

    # -- the step's side

    def expect(self, nodes: dict[str, list[int]]) -> None:
        """The step's layout: node name -> its ranks."""
        with self.lock:
            for name, ranks in nodes.items():
                node = self.nodes.get(name)
                if node is None:
                    node = self.nodes[name] = StepNode(name, ranks)
                else:
                    node.ranks = list(ranks)
                node.expected = True
            self.output.set_layout(nodes)
            self.expected = True
            self.lock.notify_all()

    def fail(self, name: str, text: str) -> None:
        """Count node `name` as failed (e.g. it never connected): it is done."""
        with self.lock:
            node = self.nodes.get(name)
            if node is None:
                node = self.nodes[name] = StepNode(name, [])
            if node.done:
                return
            self.failures.setdefault(name, text)
            node.done = True
            self.lock.notify_all()

    def abort(self, reason: str) -> None:
        """Every node not done yet failed with `reason` (srun's I/O broke)."""
        with self.lock:
            for node in self.nodes.values():
                if not node.done:
                    self.failures.setdefault(node.name, reason)
                    node.done = True
            self.lock.notify_all()

    def close(self) -> None:
        """srun is closing: wait() returns and the stdin forwarding stops."""
        with self.lock:
            self.closing = True
            self.lock.notify_all()

    def all_done(self) -> bool:
        with self.lock:
            if self.closing:
                return True
            return self.expected and all(n.done for n in self.nodes.values() if n.expected)

    def wait(self, timeout: float | None = None) -> bool:
        """Until every expected node is done: True, or False on timeout."""
        with self.lock:
            return self.lock.wait_for(self.all_done, timeout)

    def pending(self) -> list[str]:
        with self.lock:
            return sorted(n.name for n in self.nodes.values() if n.expected and not n.done)

    def connected(self) -> list[str]:
        with self.lock:
            return sorted(n.name for n in self.nodes.values() if n.connected)

    # -- the agents' side

    def identify(self, token: str, name: str, ranks: list[int]) -> StepNode | None:
        """A hello: the node it connects, or None when it is refused (wrong token, or the node already
        connected or is done)."""
        with self.lock:
            node = self.nodes.get(name)
            if not same_token(token, self.token) or (node is not None and (node.connected or node.done)):
                return None
            if node is None:
                node = self.nodes[name] = StepNode(name, ranks)
            elif not node.ranks:
                node.ranks = ranks
            node.connected = True
            self.lock.notify_all()
            return node

    def take_early(self) -> list[tuple[StepNode, bytes]]:
        """Frames that came with a hello before expect(), once the layout is known (labels need it)."""
        with self.lock:
            if not self.expected:
                return []
            early = [(n, n.early) for n in self.nodes.values() if n.early]
            for node, _ in early:
                node.early = b""
            return early

    def received(self, node: StepNode, data: bytes) -> None:
        """Bytes from `node`'s connection: output is written, exits and start failures recorded. Only the
        connections' reader calls it."""
        try:
            frames = node.decoder.feed(data)
        except ProtocolError as exc:
            self.connection_ended(node, f"protocol error: {exc}")
            return
        for kind, rank, payload in frames:
            if kind in (STDOUT, STDERR):
                self.output.write(kind, rank, payload)
            elif kind == EXIT:
                try:
                    result = parse_exit(payload)
                except (ValueError, TypeError) as exc:
                    self.connection_ended(node, f"protocol error: {exc}")
                    return
                self.output.end(rank)
                with self.lock:
                    self.exits[rank] = result
                    node.exited.add(rank)
                    self.lock.notify_all()
            elif kind == FAILED:
                with self.lock:
                    self.failures.setdefault(node.name, payload.decode("utf-8", "replace"))
                    node.failed_frame = True
                    self.lock.notify_all()
            # Unknown frame types are skipped: a newer agent may send more than this srun knows.

    def connection_ended(self, node: StepNode, reason: str = CONNECTION_LOST) -> None:
        """The node's connection is over: it is done, failed if some of its ranks never exited."""
        for rank in node.ranks:
            self.output.end(rank)
        with self.lock:
            missing = [r for r in node.ranks if r not in node.exited]
            if (missing or reason != CONNECTION_LOST) and not node.failed_frame:
                self.failures.setdefault(node.name, reason)
            node.done = True
            self.lock.notify_all()

    # -- what goes to the agents

    def queue_signal(self, signum: int) -> None:
        """For every node not done, connected or not yet, ahead of its queued stdin."""
        data = frame(SIGNAL, ALL_RANKS, str(signum).encode())
        with self.lock:
            for node in self.nodes.values():
                if not node.done:
                    node.urgent.append(data)

    def queue_window(self, rows: int, cols: int) -> None:
        """The new window size, for the node of task 0 (the one with the pseudo-terminal)."""
        data = frame(WINDOW, 0, window_payload(rows, cols))
        with self.lock:
            for node in self.nodes.values():
                if not node.done and 0 in node.ranks:
                    node.urgent.append(data)

    def next_to_send(self, node: StepNode) -> bool:
        """Put the node's next queued frame in `node.sending`, signals first; False when none is left."""
        with self.lock:
            if node.urgent:
                node.sending = memoryview(node.urgent.popleft())
            elif node.queued:
                data = node.queued.popleft()
                node.queued_bytes -= len(data)
                node.sending = memoryview(data)
                self.lock.notify_all()  # the stdin thread may wait for room
            else:
                return False
            return True

    def drop_output(self, node: StepNode) -> None:
        """Nothing more can reach `node`: forget what was queued for it."""
        with self.lock:
            node.drop_output()
            self.lock.notify_all()

    def drop_done_output(self) -> None:
        with self.lock:
            for node in self.nodes.values():
                if node.done and node.has_output():
                    self.drop_output(node)

    # -- stdin

    def stdin_targets(self) -> list[StepNode]:
        """The expected nodes that take srun's stdin (--input)."""
        rank = self.input_rank
        with self.lock:
            if rank is None:
                return []
            return [n for n in self.nodes.values() if n.expected and (rank == ALL_RANKS or rank in n.ranks)]

    def queue_stdin(self, targets: list[StepNode], data: bytes) -> bool:
        """Queue stdin bytes for the targets still running; False once none is (or srun is closing)."""
        assert self.input_rank is not None
        for start in range(0, len(data), MAX_PAYLOAD):
            message = frame(STDIN, self.input_rank, data[start:start + MAX_PAYLOAD])
            with self.lock:
                live = [n for n in targets if not n.done]
                if not live or self.closing:
                    return False
                for node in live:
                    node.queued.append(message)
                    node.queued_bytes += len(message)
        return True

    def wait_for_room(self, targets: list[StepNode]) -> bool:
        """Backpressure: until no live target has a lot of stdin queued; False if srun is closing."""
        with self.lock:
            self.lock.wait_for(lambda: self.closing or all(
                n.done or n.queued_bytes < STDIN_HIGH_WATER for n in targets))
            return not self.closing

    def close_stdin(self, targets: list[StepNode]) -> None:
        assert self.input_rank is not None
        closed = frame(STDIN_CLOSED, self.input_rank)
        with self.lock:
            for node in targets:
                if not node.done:
                    node.queued.append(closed)
                    node.queued_bytes += len(closed)
