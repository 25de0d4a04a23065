"""Progress reporting for long replays: a protocol, a line rewritten in place on a terminal, plain
lines for logs, and a silent one."""
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


def stream_progress(label: str, stream: TextIO | None = None) -> TerminalProgress | LogProgress:
    """Progress on `stream` (stderr by default): rewritten in place on a terminal, plain lines in a log,
    where carriage returns would pile up as one endless line."""
    stream = stream if stream is not None else sys.stderr
    return TerminalProgress(label, stream=stream) if stream.isatty() else LogProgress(label, stream)


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
        self._finished = False

    def update(self, done: int, total: int) -> None:
        if self._finished:
            return  # a replay keeps reporting done == total for the events after its last job
        now_s = self.clock()
        final = total > 0 and done >= total
        if not final and self._last_print_s is not None and now_s - self._last_print_s < self.min_interval_s:
            return  # a replay calls this per event: printing each would dominate its run time
        self._finished = final
        self._last_print_s = now_s
        text = progress_text(self.label, done, total, now_s - self._started_s)
        # Pad with spaces so a shorter line fully covers the previous one.
        self.stream.write("\r" + text.ljust(self._width))
        self._width = max(self._width, len(text))
        if final:
            self.stream.write("\n")
        self.stream.flush()


class LogProgress:
    """Plain lines for a log or a pipe: one each time another `step_pct` of the total is done, or after
    `max_silence_s` without one (a slow stretch still shows signs of life), and always the final one."""

    def __init__(self, label: str = "replay", stream: TextIO | None = None, *, step_pct: float = 10.0,
                 max_silence_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.step_pct = step_pct
        self.max_silence_s = max_silence_s
        self.clock = clock
        self._started_s = clock()
        self._last_print_s = self._started_s
        self._next_pct = step_pct
        self._finished = False

    def update(self, done: int, total: int) -> None:
        if self._finished:
            return  # as TerminalProgress: one final line
        now_s = self.clock()
        pct = 100.0 * done / total if total else 0.0
        final = total > 0 and done >= total
        if not final and pct < self._next_pct and now_s - self._last_print_s < self.max_silence_s:
            return
        self._finished = final
        self._last_print_s = now_s
        while self._next_pct <= pct:
            self._next_pct += self.step_pct
        self.stream.write(progress_text(self.label, done, total, now_s - self._started_s) + "\n")
        self.stream.flush()


def progress_text(label: str, done: int, total: int, elapsed_s: float) -> str:
    """`replay: 40/100 ( 40.0%) 20/s ETA 0:03`; the final one ends `in 0:05`."""
    pct = 100.0 * done / total if total else 0.0
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    text = f"{label}: {done}/{total} ({pct:5.1f}%) {rate:,.0f}/s"
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
