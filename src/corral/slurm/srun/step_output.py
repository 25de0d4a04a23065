"""Where srun writes its tasks' output: stdout and stderr frames to its own stdout and stderr, whole
lines prefixed with the task's rank under -l (--label), as Slurm's srun prints them."""
from __future__ import annotations

from corral.stepio import STDERR, STDOUT


class StepOutput:
    """Routes each task's output to srun's streams (binary files). With `label`, every line is prefixed
    with `<rank>: `, ranks right-aligned to `width` digits, and a task's last line without a newline gets
    one when the task ends. A stream that fails (srun | head: the reader went away) drops what follows.

    Used by one thread at a time (srun's I/O thread, then close()): it takes no lock."""

    def __init__(self, stdout, stderr, label: bool = False) -> None:
        self._streams = {STDOUT: stdout, STDERR: stderr}
        self._broken: set[bytes] = set()
        self.label = label
        self.width = 1
        self._partial: dict[tuple[bytes, int], bytes] = {}  # (stream, rank) -> unfinished line

    def set_layout(self, nodes: dict[str, list[int]]) -> None:
        """The labels' width: that of the step's largest rank (or its task count less one)."""
        total = sum(len(r) for r in nodes.values())
        largest = max((max(r) for r in nodes.values() if r), default=0)
        self.width = len(str(max(total - 1, largest, 0)))

    def write(self, kind: bytes, rank: int, data: bytes) -> None:
        if not self.label:
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

    def end(self, rank: int) -> None:
        """Task `rank` has no more output: print its unfinished lines."""
        self._flush_partial(STDOUT, rank)
        self._flush_partial(STDERR, rank)

    def end_all(self) -> None:
        for kind, rank in list(self._partial):
            self._flush_partial(kind, rank)

    def _prefix(self, rank: int) -> bytes:
        return f"{rank:>{self.width}}: ".encode()

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
            self._broken.add(kind)  # keep collecting exits
