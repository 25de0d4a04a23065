"""srun's bookkeeping of a step's I/O (corral.slurm.srun.step_book, step_output) without sockets: the frames an
agent would send are fed in as bytes (test_stepio.py runs the same over real loopback sockets)."""
from __future__ import annotations

import io
import threading

import pytest

from corral.slurm.srun.step_book import STDIN_HIGH_WATER, StepBook
from corral.slurm.srun.step_output import StepOutput
from corral.stepio import (
    ALL_RANKS,
    CONNECTION_LOST,
    EXIT,
    FAILED,
    HEADER,
    MAX_PAYLOAD,
    SIGNAL,
    STDERR,
    STDIN,
    STDIN_CLOSED,
    STDOUT,
    FrameDecoder,
    exit_payload,
    frame,
    parse_input,
)

TOKEN = "secret"


def make_book(label: bool = False, input: str = "all") -> tuple[StepBook, io.BytesIO, io.BytesIO]:
    out, err = io.BytesIO(), io.BytesIO()
    return StepBook(TOKEN, parse_input(input), StepOutput(out, err, label)), out, err


def out(rank: int, data: bytes) -> bytes:
    return frame(STDOUT, rank, data)


def exit_(rank: int, code: int = 0, sig: int = 0) -> bytes:
    return frame(EXIT, rank, exit_payload(code, sig))


def queued(node) -> list[tuple[bytes, int, bytes]]:
    return FrameDecoder().feed(b"".join(node.urgent) + b"".join(node.queued))


# -- hellos

@pytest.mark.parametrize("before, hello, accepted", [
    ([], (TOKEN, "n1", [0]), True),
    ([], ("guess", "n1", [0]), False),  # wrong token
    ([("hello", "n1")], (TOKEN, "n1", [0]), False),  # a second connection for the node
    ([("fail", "n1")], (TOKEN, "n1", [0]), False),  # the node already counts as failed
    ([("hello", "n1")], (TOKEN, "n2", [1]), True),
    ([], (TOKEN, "stranger", [7]), True),  # not in the layout (yet): srun may not have it
], ids=["first", "wrong-token", "second-connection", "failed-node", "other-node", "before-layout"])
def test_hellos(before, hello, accepted):
    book, _, _ = make_book()
    book.expect({"n1": [0], "n2": [1]})
    for action, name in before:
        if action == "hello":
            assert book.identify(TOKEN, name, [0]) is not None
        else:
            book.fail(name, "gone")
    node = book.identify(*hello)
    assert (node is not None) == accepted
    if accepted:
        assert node.name == hello[1] and hello[1] in book.connected()


def test_a_hello_keeps_the_layouts_ranks_and_gives_its_own_to_a_node_outside_it():
    book, _, _ = make_book()
    book.expect({"n1": [0, 1]})
    assert book.identify(TOKEN, "n1", [5]).ranks == [0, 1]
    assert book.identify(TOKEN, "early", [3]).ranks == [3]


# -- frames, exits and the end of a connection

@pytest.mark.parametrize("label, data, stdout, stderr, exits, failure", [
    (False, out(0, b"par") + out(1, b"tial\n") + frame(STDERR, 1, b"oops\n") + exit_(0) + exit_(1, 0, 9),
     b"partial\n", b"oops\n", {0: (0, 0), 1: (0, 9)}, None),
    # Labelled: whole lines; a task's last unfinished line ends with its exit.
    (True, out(0, b"a\nhal") + out(1, b"one\n") + out(0, b"f\nno newline") + exit_(0) + out(1, b"two\n")
     + exit_(1), b"0: a\n1: one\n0: half\n0: no newline\n1: two\n", b"", {0: (0, 0), 1: (0, 0)}, None),
    # Exits before output (an agent that breaks the order): the output is still printed.
    (True, exit_(0, 3) + out(0, b"late") + exit_(1) + out(1, b"later\n"),
     b"1: later\n0: late\n", b"", {0: (3, 0), 1: (0, 0)}, None),
    # Output, then the connection ends with rank 1 never exited.
    (True, out(1, b"last words") + exit_(0), b"1: last words\n", b"", {0: (0, 0)}, CONNECTION_LOST),
    (False, exit_(0, 127) + exit_(1, 127) + frame(FAILED, ALL_RANKS, b"command not found: nope"),
     b"", b"", {0: (127, 0), 1: (127, 0)}, "command not found: nope"),
    # The start failure wins over the ranks that never exited.
    (False, frame(FAILED, ALL_RANKS, b"no such directory"), b"", b"", {}, "no such directory"),
    (False, out(0, b"x\n") + frame(EXIT, 0, b"[1]") + exit_(1), b"x\n", b"", {}, "protocol error: "),
    (False, HEADER.pack(STDOUT, 0, MAX_PAYLOAD + 1), b"", b"", {}, "protocol error: "),
    # Every rank exited, then garbage: the node still failed.
    (False, exit_(0) + exit_(1) + frame(EXIT, 0, b"[1]"), b"", b"", {0: (0, 0), 1: (0, 0)}, "protocol error: "),
    (False, frame(b"?", 0, b"from a newer agent") + exit_(0) + exit_(1), b"", b"", {0: (0, 0), 1: (0, 0)},
     None),
], ids=["raw", "labelled", "exit-before-output", "lost", "failed-start", "failed-start-no-exits",
        "bad-exit", "oversized-frame", "garbage-after-exits", "unknown-frame"])
@pytest.mark.parametrize("split", [False, True], ids=["whole", "byte-by-byte"])
def test_frames_then_the_connection_ends(label, data, stdout, stderr, exits, failure, split):
    book, out_, err = make_book(label=label)
    book.expect({"n1": [0, 1]})
    node = book.identify(TOKEN, "n1", [0, 1])
    for piece in ([data[i:i + 1] for i in range(len(data))] if split else [data]):
        if node.done:
            break
        book.received(node, piece)
    if not node.done:  # a protocol error ends the connection at once
        assert not book.all_done()  # a node is done when its connection ends, not at its last exit
        book.connection_ended(node)
    assert book.all_done()
    assert (out_.getvalue(), err.getvalue(), book.exits) == (stdout, stderr, exits)
    if failure is None:
        assert book.failures == {}
    else:
        assert list(book.failures) == ["n1"] and book.failures["n1"].startswith(failure)


def test_labels_take_the_width_of_the_largest_rank():
    book, out_, _ = make_book(label=True)
    book.expect({"n1": [0, 1], "n2": [10, 11]})
    node = book.identify(TOKEN, "n1", [0, 1])
    book.received(node, out(0, b"a\n") + out(11, b"b\n"))
    assert out_.getvalue() == b" 0: a\n11: b\n"


@pytest.mark.parametrize("layout, width", [
    ({"n1": [0]}, 1), ({"n1": list(range(10))}, 1), ({"n1": list(range(11))}, 2),
    ({"n1": [0], "n2": [100]}, 3), ({"n1": []}, 1),
])
def test_label_width(layout, width):
    output = StepOutput(io.BytesIO(), io.BytesIO(), label=True)
    output.set_layout(layout)
    assert output.width == width


def test_a_broken_stdout_drops_output_but_exits_still_count():
    class Closed(io.BytesIO):
        def write(self, data):
            raise BrokenPipeError

    err = io.BytesIO()
    book = StepBook(TOKEN, None, StepOutput(Closed(), err))
    book.expect({"n1": [0]})
    node = book.identify(TOKEN, "n1", [0])
    book.received(node, out(0, b"lost\n") + frame(STDERR, 0, b"kept\n") + exit_(0, 2))
    assert book.exits == {0: (2, 0)} and err.getvalue() == b"kept\n"


# -- when the step is done

def test_a_node_that_never_connects_keeps_the_step_waiting_until_failed():
    book, _, _ = make_book()
    book.expect({"n1": [0], "n2": [1]})
    node = book.identify(TOKEN, "n1", [0])
    book.received(node, exit_(0))
    book.connection_ended(node)
    assert not book.all_done() and not book.wait(0.01)
    assert book.pending() == ["n2"] and book.connected() == ["n1"]
    book.fail("n2", "node n2 never connected")
    book.fail("n2", "a second reason is not kept")
    assert book.all_done() and book.pending() == []
    assert book.failures == {"n2": "node n2 never connected"} and book.exits == {0: (0, 0)}


def test_nothing_is_done_before_the_layout_and_everything_is_once_closing():
    book, _, _ = make_book()
    node = book.identify(TOKEN, "n1", [0])
    book.received(node, exit_(0))
    book.connection_ended(node)
    assert not book.all_done()  # srun does not know the step's nodes yet
    book.expect({"n1": [0]})
    assert book.all_done()
    other, _, _ = make_book()
    other.expect({"n1": [0]})
    other.close()
    assert other.wait(0)


def test_abort_fails_every_node_not_done():
    book, _, _ = make_book()
    book.expect({"n1": [0], "n2": [1]})
    node = book.identify(TOKEN, "n1", [0])
    book.received(node, exit_(0))
    book.connection_ended(node)
    book.abort("srun I/O error: boom")
    assert book.all_done() and book.failures == {"n2": "srun I/O error: boom"}


def test_frames_that_came_with_the_hello_wait_for_the_layout():
    book, out_, _ = make_book(label=True)
    node = book.identify(TOKEN, "n1", [0])
    node.early = out(0, b"early\n")
    assert book.take_early() == []
    book.expect({"n1": [0], "n2": list(range(1, 11))})
    [(early_node, data)] = book.take_early()
    book.received(early_node, data)
    assert out_.getvalue() == b" 0: early\n" and book.take_early() == []


# -- what goes to the agents

@pytest.mark.parametrize("input, targets, rank", [
    ("all", ["n1", "n2"], ALL_RANKS),
    ("1", ["n2"], 1),
    ("2", ["n2"], 2),
    ("0", ["n1"], 0),
    ("7", [], 7),  # no such task: stdin goes nowhere
    ("none", [], None),
])
def test_stdin_goes_to_the_input_ranks_node(input, targets, rank):
    book, _, _ = make_book(input=input)
    book.expect({"n1": [0], "n2": [1, 2]})
    chosen = book.stdin_targets()
    assert [n.name for n in chosen] == targets
    if not chosen:
        return
    assert book.queue_stdin(chosen, b"line\n")
    book.close_stdin(chosen)
    for node in book.nodes.values():
        expected = [(STDIN, rank, b"line\n"), (STDIN_CLOSED, rank, b"")] if node.name in targets else []
        assert queued(node) == expected


def test_stdin_stops_when_its_nodes_are_done_and_skips_done_ones():
    book, _, _ = make_book()
    book.expect({"n1": [0], "n2": [1]})
    targets = book.stdin_targets()
    book.fail("n1", "gone")
    assert book.queue_stdin(targets, b"a")
    book.close_stdin(targets)
    assert queued(book.nodes["n1"]) == []
    assert queued(book.nodes["n2"]) == [(STDIN, ALL_RANKS, b"a"), (STDIN_CLOSED, ALL_RANKS, b"")]
    book.fail("n2", "gone")
    assert not book.queue_stdin(targets, b"b")


def test_stdin_backpressure_until_the_queue_drains():
    book, _, _ = make_book()
    book.expect({"n1": [0]})
    [node] = targets = book.stdin_targets()
    assert book.queue_stdin(targets, b"x" * STDIN_HIGH_WATER)
    room: list[bool] = []
    waiter = threading.Thread(target=lambda: room.append(book.wait_for_room(targets)))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # srun stops reading its stdin
    assert book.next_to_send(node) and node.queued_bytes == 0
    waiter.join(5)
    assert room == [True]
    book.close()
    assert not book.wait_for_room(targets)


def test_signals_go_before_queued_stdin_to_every_node_not_done():
    book, _, _ = make_book()
    book.expect({"n1": [0], "n2": [1], "n3": [2]})
    book.identify(TOKEN, "n1", [0])
    book.fail("n3", "gone")
    book.queue_stdin(book.stdin_targets(), b"in")
    book.queue_signal(10)
    sent = []
    node = book.nodes["n1"]
    while book.next_to_send(node):
        sent.extend(FrameDecoder().feed(bytes(node.sending)))
        node.sending = memoryview(b"")
    assert sent == [(SIGNAL, ALL_RANKS, b"10"), (STDIN, ALL_RANKS, b"in")]
    assert queued(book.nodes["n2"]) == [(SIGNAL, ALL_RANKS, b"10"), (STDIN, ALL_RANKS, b"in")]  # not connected
    assert queued(book.nodes["n3"]) == []
    book.fail("n2", "gone")
    book.drop_done_output()
    assert not book.nodes["n2"].has_output()
