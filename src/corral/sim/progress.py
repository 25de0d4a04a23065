"""Progress reporting for long replays: a protocol, a terminal line, and a silent one."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Protocol, TextIO


class Progress(Protocol):
    def update(self, done: int, total: int) -> None:
        """`done` of `total` units (jobs finished, events handled) are complete; done == total ends it."""


class NullProgress:
    def update(self, done: int, total: int) -> None:
        pass


class TerminalProgress:
    """One line on stderr, rewritten in place ("\\r"), at most every `min_interval_s`; the final
    update (done == total) always prints and ends the line."""

    def __init__(self, label: str = "replay", *, stream: TextIO | None = None, min_interval_s: float = 0.2,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.min_interval_s = min_interval_s
        self.clock = clock
        self._started_s = clock()
        self._last_print_s: float | None = None
        self._width = 0

    def update(self, done: int, total: int) -> None:
        now_s = self.clock()
        final = total > 0 and done >= total
        if not final and self._last_print_s is not None and now_s - self._last_print_s < self.min_interval_s:
            return  # a replay calls this per event: printing each would dominate its run time
        self._last_print_s = now_s
        text = self._line(done, total, now_s - self._started_s)
        # Pad with spaces so a shorter line fully covers the previous one.
        self.stream.write("\r" + text.ljust(self._width))
        self._width = max(self._width, len(text))
        if final:
            self.stream.write("\n")
        self.stream.flush()

    def _line(self, done: int, total: int, elapsed_s: float) -> str:
        pct = 100.0 * done / total if total else 0.0
        rate = done / elapsed_s if elapsed_s > 0 else 0.0
        text = f"{self.label}: {done}/{total} ({pct:5.1f}%) {rate:,.0f}/s"
        if 0 < done < total and rate > 0:
            text += f" ETA {_clock_text((total - done) / rate)}"
        elif done >= total > 0:
            text += f" in {_clock_text(elapsed_s)}"
        return text


def _clock_text(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
