"""srun's end of the step I/O (corral.slurm.srun.step_streams.StepStreams; wire format corral.stepio) over
real loopback sockets, with the agent's end played by a plain socket speaking the wire protocol
(test_step_runner.py runs the real agent end; test_step_book.py the bookkeeping without sockets)."""
from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from corral import stepio
from corral.slurm.srun.step_streams import StepStreams
from corral.stepio import ALL_RANKS, FrameDecoder, frame


class Agent:
    """The agent's end of one connection, by hand."""

    def __init__(self, streams: StepStreams, node: str, ranks: list[int], token: str | None = None) -> None:
        self.sock = socket.create_connection(("127.0.0.1", streams.port), timeout=5)
        self.sock.sendall(stepio.hello(streams.token if token is None else token, node, ranks))
        self.decoder = FrameDecoder()
        self.received: list[tuple[bytes, int, bytes]] = []

    def send(self, kind: bytes, rank: int, payload: bytes = b"") -> None:
        self.sock.sendall(frame(kind, rank, payload))

    def out(self, rank: int, data: bytes) -> None:
        self.send(stepio.STDOUT, rank, data)

    def exit(self, rank: int, code: int = 0, sig: int = 0) -> None:
        self.send(stepio.EXIT, rank, stepio.exit_payload(code, sig))

    def finish(self) -> None:
        """Half-close, then read what srun sends until it closes its end (what the real agent does)."""
        self.sock.shutdown(socket.SHUT_WR)
        self.read_until(lambda: False)
        self.sock.close()

    def read_until(self, predicate, timeout_s: float = 5.0) -> list[tuple[bytes, int, bytes]]:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise AssertionError(f"timed out; received {self.received}") from None
            if not data:
                break
            self.received.extend(self.decoder.feed(data))
        return self.received


@pytest.fixture
def make_streams():
    made: list[StepStreams] = []

    def make(**kwargs) -> tuple[StepStreams, io.BytesIO, io.BytesIO]:
        out, err = io.BytesIO(), io.BytesIO()
        streams = StepStreams(host="127.0.0.1", stdout=out, stderr=err, **kwargs).start()
        made.append(streams)
        return streams, out, err

    yield make
    for streams in made:
        streams.close()


def test_frames_survive_any_split():
    data = frame(b"o", 3, b"hello") + frame(b"x", 3, b'{"exit_code":0,"signal":0}') + frame(b"c", ALL_RANKS)
    decoder = FrameDecoder()
    got = []
    for i in range(len(data)):
        got.extend(decoder.feed(data[i:i + 1]))
    assert got == [(b"o", 3, b"hello"), (b"x", 3, b'{"exit_code":0,"signal":0}'), (b"c", ALL_RANKS, b"")]
    assert decoder.pending == 0
    with pytest.raises(stepio.ProtocolError):
        FrameDecoder().feed(stepio.HEADER.pack(b"o", 0, stepio.MAX_PAYLOAD + 1))


@pytest.mark.parametrize("line, parsed", [
    (stepio.hello("t", "n1", [0, 1])[:-1], ("t", "n1", [0, 1])),
    (b'{"token": "t", "node": "n1"}', None),
    (b'{"token": 1, "node": "n1", "ranks": []}', None),
    (b'{"token": "t", "node": "n1", "ranks": ["x"]}', None),
    (b'["t", "n1", [0]]', None),
    (b'{"token": "t", "node": ', None),
])
def test_hello_lines(line, parsed):
    if parsed is None:
        with pytest.raises(stepio.ProtocolError):
            stepio.parse_hello(line)
    else:
        assert stepio.parse_hello(line) == parsed
    assert stepio.same_token("abc", "abc") and not stepio.same_token("abd", "abc")


def test_raw_output_exits_and_done_after_the_connection_ends(make_streams):
    streams, out, err = make_streams()
    streams.expect({"n1": [0, 1]})
    agent = Agent(streams, "n1", [0, 1])
    agent.out(0, b"par")
    agent.out(1, b"tial\n")
    agent.send(stepio.STDERR, 1, b"oops\n")
    agent.exit(0, 0)
    agent.exit(1, 0, 9)
    assert not streams.wait(0.2)  # every rank exited, but the connection is still open
    agent.finish()
    assert streams.wait(5)
    assert streams.exits == {0: (0, 0), 1: (0, 9)} and streams.failures == {}
    assert out.getvalue() == b"partial\n" and err.getvalue() == b"oops\n"


def test_labelled_output_is_complete_lines_with_ranks(make_streams):
    streams, out, err = make_streams(label=True)
    streams.expect({"n1": [0, 1], "n2": [10, 11]})  # 12 ranks in all: width 2 as Slurm pads
    first, second = Agent(streams, "n1", [0, 1]), Agent(streams, "n2", [10, 11])
    first.out(0, b"a\nhal")
    second.out(10, b"x\n")
    first.out(1, b"one\n")
    first.out(0, b"f\nno newline")
    second.send(stepio.STDERR, 11, b"e1\ne2\n")
    for rank in (0, 1):
        first.exit(rank)
    first.finish()
    for rank in (10, 11):
        second.exit(rank)
    second.finish()
    assert streams.wait(5)
    lines = out.getvalue().decode().splitlines(keepends=True)
    assert sorted(lines) == sorted([" 0: a\n", "10: x\n", " 1: one\n", " 0: half\n", " 0: no newline\n"])
    assert lines.index(" 0: a\n") < lines.index(" 0: half\n") < lines.index(" 0: no newline\n")
    assert err.getvalue() == b"11: e1\n11: e2\n"


def test_wrong_token_and_second_connection_are_dropped(make_streams):
    streams, out, _ = make_streams()
    streams.expect({"n1": [0]})
    intruder = Agent(streams, "n1", [0], token="guess")
    assert intruder.read_until(lambda: False) == []  # closed without a word
    agent = Agent(streams, "n1", [0])
    agent.out(0, b"ok\n")
    deadline = time.monotonic() + 5
    while streams.connected != ["n1"] and time.monotonic() < deadline:
        time.sleep(0.01)
    again = Agent(streams, "n1", [0])
    assert again.read_until(lambda: False) == []
    agent.exit(0, 3)
    agent.finish()
    assert streams.wait(5)
    assert streams.exits == {0: (3, 0)} and out.getvalue() == b"ok\n"


def test_lost_connection_fails_the_node(make_streams):
    # input="none": nothing unread in the agent's socket when it closes, so it ends with FIN, not RST
    # (which could discard what srun has not read yet).
    streams, out, _ = make_streams(label=True, input="none")
    streams.expect({"n1": [0, 1]})
    agent = Agent(streams, "n1", [0, 1])
    agent.out(1, b"last words")
    agent.exit(0, 0)
    agent.sock.close()  # rank 1 never exited
    assert streams.wait(5)
    assert streams.failures == {"n1": stepio.CONNECTION_LOST} and streams.exits == {0: (0, 0)}
    assert out.getvalue() == b"1: last words\n"  # what arrived is printed


def test_failed_start_reports_the_error(make_streams):
    streams, _, _ = make_streams()
    streams.expect({"n1": [0]})
    agent = Agent(streams, "n1", [0])
    agent.exit(0, 127)
    agent.send(stepio.FAILED, ALL_RANKS, b"command not found: nope")
    agent.finish()
    assert streams.wait(5)
    assert streams.failures == {"n1": "command not found: nope"} and streams.exits == {0: (127, 0)}


def test_stdin_goes_to_every_node_then_closes(make_streams):
    read_end, write_end = os.pipe()
    with open(read_end, "rb", buffering=0) as stdin:
        streams, _, _ = make_streams(stdin=stdin)
        first, second = Agent(streams, "n1", [0]), Agent(streams, "n2", [1])
        os.write(write_end, b"before expect\n")
        streams.expect({"n1": [0], "n2": [1]})
        os.write(write_end, b"more\n")
        os.close(write_end)
        for agent in (first, second):
            frames = agent.read_until(lambda a=agent: any(f[0] == stepio.STDIN_CLOSED for f in a.received))
            assert {rank for _, rank, _ in frames} == {ALL_RANKS}
            assert b"".join(p for k, _, p in frames if k == stepio.STDIN) == b"before expect\nmore\n"
            assert frames[-1][0] == stepio.STDIN_CLOSED


def test_stdin_for_one_rank_goes_only_to_its_node(make_streams):
    streams, _, _ = make_streams(stdin=io.BytesIO(b"for rank 1\n"), input="1")
    first, second = Agent(streams, "n1", [0]), Agent(streams, "n2", [1, 2])
    streams.expect({"n1": [0], "n2": [1, 2]})
    frames = second.read_until(lambda: any(f[0] == stepio.STDIN_CLOSED for f in second.received))
    assert frames == [(stepio.STDIN, 1, b"for rank 1\n"), (stepio.STDIN_CLOSED, 1, b"")]
    first.exit(0)
    first.finish()  # reads until srun closes: nothing came
    assert first.received == []


def test_no_stdin_still_closes_the_tasks_stdin(make_streams):
    streams, _, _ = make_streams(stdin=None)
    agent = Agent(streams, "n1", [0])
    streams.expect({"n1": [0]})
    assert agent.read_until(lambda: agent.received) == [(stepio.STDIN_CLOSED, ALL_RANKS, b"")]


def test_signal_reaches_connected_and_later_nodes(make_streams):
    streams, _, _ = make_streams(input="none")
    streams.expect({"n1": [0], "n2": [1]})
    first = Agent(streams, "n1", [0])
    deadline = time.monotonic() + 5
    while streams.connected != ["n1"] and time.monotonic() < deadline:
        time.sleep(0.01)
    streams.signal(10)
    assert first.read_until(lambda: first.received) == [(stepio.SIGNAL, ALL_RANKS, b"10")]
    second = Agent(streams, "n2", [1])  # connects after the signal: it still gets it
    assert second.read_until(lambda: second.received) == [(stepio.SIGNAL, ALL_RANKS, b"10")]


def test_a_node_that_never_connects_can_be_failed(make_streams):
    streams, _, _ = make_streams()
    streams.expect({"n1": [0], "n2": [1]})
    agent = Agent(streams, "n1", [0])
    agent.exit(0)
    agent.finish()
    assert not streams.wait(0.3)
    assert streams.pending == ["n2"]
    streams.fail("n2", "node n2 never connected")
    assert streams.wait(1)
    assert streams.failures == {"n2": "node n2 never connected"} and streams.exits == {0: (0, 0)}


def test_output_already_sent_is_printed_before_wait_returns(make_streams):
    """Much output, then the exit: all of it is on stdout when wait() returns."""
    streams, out, _ = make_streams()
    streams.expect({"n1": [0]})
    agent = Agent(streams, "n1", [0])
    chunk = b"x" * 65536
    sender = threading.Thread(target=lambda: ([agent.out(0, chunk) for _ in range(64)], agent.exit(0),
                                              agent.finish()))
    sender.start()
    assert streams.wait(10)
    sender.join()
    assert len(out.getvalue()) == 64 * len(chunk)


def test_srun_module_imports_only_the_standard_library():
    code = "import sys, corral.slurm.srun.step_streams; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", "import json\n" + code], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out))
    assert not {"asyncio", "pydantic", "secrets", "hmac", "corral.protocol", "corral.agent"} & loaded


def test_output_before_expect_waits_for_the_layout(make_streams):
    """An agent may connect and write before srun has the step's layout: labels still get its width."""
    streams, out, _ = make_streams(label=True)
    agent = Agent(streams, "n1", [0])
    agent.out(0, b"early\n")
    agent.exit(0)
    finishing = threading.Thread(target=agent.finish)
    finishing.start()
    time.sleep(0.2)
    assert out.getvalue() == b"" and streams.exits == {}
    streams.expect({"n1": [0], "n2": list(range(1, 10)), "n3": [10]})
    finishing.join()
    deadline = time.monotonic() + 5
    while not streams.exits and time.monotonic() < deadline:
        time.sleep(0.01)
    assert out.getvalue() == b" 0: early\n" and streams.exits == {0: (0, 0)}
    assert streams.pending == ["n2", "n3"]


def test_signal_from_a_handler_while_the_lock_is_held(make_streams):
    """srun forwards SIGINT from a signal handler, which may interrupt the main thread inside wait():
    signal() must not need the lock."""
    streams, _, _ = make_streams(input="none")
    streams.expect({"n1": [0]})
    agent = Agent(streams, "n1", [0])
    previous = signal.signal(signal.SIGUSR1, lambda signum, _frame: streams.signal(signum))
    try:
        with streams._lock:  # as inside wait() or exits: the handler runs here
            signal.raise_signal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert agent.read_until(lambda: agent.received) == [(stepio.SIGNAL, ALL_RANKS, b"%d" % signal.SIGUSR1)]
