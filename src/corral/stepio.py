"""The job-step I/O wire format, shared by srun (corral.slurm.srun.step_streams) and the agent
(corral.agent.step_runner).

srun listens on a TCP port and gives its address and a random token to the controller with the step
request; each step node's agent connects back once (one connection per node, before it starts the node's
tasks), streams the tasks' output and exits over it, and receives srun's stdin and signals through it.

Everything after the hello line is binary frames, both ways:

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
    `w` the terminal's window size changed (srun --pty: rank 0; payload = "ROWS COLS" as text): the agent
        sets it on task 0's pseudo-terminal, whose foreground process group gets SIGWINCH
- end: the agent closes the connection after its last `x` (or `f`). A node is done when its connection
  ends; if some of its ranks have no exit by then (and no `f` came), the node failed with
  "connection lost". srun closing the connection while tasks run makes the agent kill them.

srun starts in milliseconds, so this module imports only the standard library's struct (and
corral.slurm.common.jsontext and corral.jobref, which import nothing heavy): no asyncio, no json, no hmac.
"""
from __future__ import annotations

import struct

from corral.jobref import ascii_number
from corral.slurm.common import jsontext

try:  # what hmac.compare_digest is, without importing hmac (and _hashlib)
    from _operator import _compare_digest
except ImportError:  # pragma: no cover - CPython always has it
    from hmac import compare_digest as _compare_digest  # type: ignore[no-redef]  # the same function

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
WINDOW = b"w"

CONNECTION_LOST = "connection lost"


class ProtocolError(ValueError):
    pass


def frame(kind: bytes, rank: int, payload: bytes = b"") -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"frame payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}")
    return HEADER.pack(kind, rank & 0xFFFFFFFF, len(payload)) + payload


def hello(token: str, node: str, ranks: list[int]) -> bytes:
    return (jsontext.dumps({"token": token, "node": node, "ranks": list(ranks)}) + "\n").encode()


def parse_hello(line: bytes) -> tuple[str, str, list[int]]:
    """A hello line (without its newline) as (token, node, ranks); ProtocolError if it is not one."""
    try:
        message = jsontext.loads(line)
        token, name, ranks = message["token"], message["node"], [int(r) for r in message["ranks"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"bad hello: {exc}") from None
    if not isinstance(token, str) or not isinstance(name, str):
        raise ProtocolError("bad hello: token and node must be strings")
    return token, name, ranks


def same_token(given: str, expected: str) -> bool:
    """Compared in constant time: the token is what keeps strangers off srun's stdin and signals."""
    return _compare_digest(given.encode(), expected.encode())


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


def window_payload(rows: int, cols: int) -> bytes:
    return f"{rows} {cols}".encode()


def parse_window(payload: bytes) -> tuple[int, int]:
    """A `w` frame's payload as (rows, cols), each 0..65535 (0: unknown); ProtocolError if it is not one."""
    parts = payload.split()
    numbers = [ascii_number(p.decode("ascii", "replace")) for p in parts]
    if len(numbers) != 2 or any(n is None or not 0 <= n <= 0xFFFF for n in numbers):
        raise ProtocolError(f"bad window size {payload[:40]!r}")
    return numbers[0], numbers[1]  # type: ignore[return-value]  # checked above


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
