"""Piecewise-constant time series (GPUs in use, jobs waiting), built from +/- events."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepSeries:
    """values[i] holds from times_s[i] until times_s[i + 1]; the last value holds until end_s."""

    times_s: tuple[float, ...]
    values: tuple[float, ...]
    end_s: float

    @classmethod
    def from_events(cls, events: Iterable[tuple[float, float]], *, start_s: float, end_s: float,
                    initial: float = 0.0) -> StepSeries:
        """Accumulate (time, delta) events. Simultaneous events merge into one step, so a job ending
        when another starts on its GPUs shows no spurious peak or dip."""
        if end_s < start_s:
            raise ValueError(f"end_s {end_s} < start_s {start_s}")
        array = np.array(sorted(events), dtype=float).reshape(-1, 2)
        times, first = np.unique(array[:, 0], return_index=True)
        deltas = np.add.reduceat(array[:, 1], first) if len(array) else np.array([])
        levels = initial + np.cumsum(deltas)
        keep = (times > start_s) & (times < end_s)  # a step at end_s would last no time
        before = levels[times <= start_s]
        level_at_start = float(before[-1]) if len(before) else initial
        out_times = (start_s, *times[keep].tolist())
        out_values = (level_at_start, *levels[keep].tolist())
        return cls(tuple(float(t) for t in out_times), tuple(float(v) for v in out_values), float(end_s))

    def _durations_s(self) -> np.ndarray:
        edges = np.append(np.asarray(self.times_s, dtype=float), self.end_s)
        return np.diff(edges)

    def integral(self) -> float:
        """Area under the series (e.g. GPU-seconds for GPUs in use)."""
        return float(np.dot(self._durations_s(), np.asarray(self.values, dtype=float)))

    def mean(self) -> float:
        """Time-weighted mean over [times_s[0], end_s]."""
        span_s = self.end_s - self.times_s[0]
        return self.integral() / span_s if span_s > 0 else (self.values[0] if self.values else 0.0)

    def maximum(self) -> float:
        return max(self.values) if self.values else 0.0

    def scaled(self, factor: float) -> StepSeries:
        return StepSeries(self.times_s, tuple(v * factor for v in self.values), self.end_s)

    def resample(self, bins: int) -> StepSeries:
        """At most `bins` equal steps, each the time-weighted mean of the original over its bin, so
        the mean and integral survive (a plot or JSON of 100k steps needs far fewer points)."""
        if len(self.times_s) <= bins or self.end_s <= self.times_s[0]:
            return self
        edges = np.linspace(self.times_s[0], self.end_s, bins + 1)
        cumulative = self._cumulative_at(edges)
        means = np.diff(cumulative) / np.diff(edges)
        return StepSeries(tuple(edges[:-1].tolist()), tuple(means.tolist()), self.end_s)

    def _cumulative_at(self, points: np.ndarray) -> np.ndarray:
        """Integral from the start up to each point."""
        times = np.asarray(self.times_s, dtype=float)
        values = np.asarray(self.values, dtype=float)
        area_before = np.concatenate(([0.0], np.cumsum(np.diff(times) * values[:-1])))
        index = np.clip(np.searchsorted(times, points, side="right") - 1, 0, len(times) - 1)
        return area_before[index] + (points - times[index]) * values[index]

    def to_dict(self) -> dict[str, object]:
        return {"times_s": list(self.times_s), "values": list(self.values), "end_s": self.end_s}
