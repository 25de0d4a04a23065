"""What the dashboard plots over time, kept in the controller's memory (bounded, lost on restart or
failover: nothing the scheduler reads depends on it, as for usage_views.LiveUsage).

- UtilisationHistory: allocated and total GPUs of the cluster, one sample per `step_s` bucket (the latest
  state seen in it, at the first time seen in it), for the last `keep` buckets. The service records after
  every scheduling cycle, where allocations change, and the route once more when read (the loop sleeps
  while nothing happens).
- JobSeries: each job's combined usage (usage_views.combine over its nodes) each time an agent reports it,
  for the `jobs` jobs reported most recently, at most `points` samples each (the oldest go first).
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from typing import Any

UTILISATION_STEP_S = 10.0
UTILISATION_KEEP = 360  # one hour at 10 s
# At most 1,000 jobs' series of 120 points (an hour at the agents' default 30 s interval): 17.5 MiB
# when every one is full (tracemalloc, floats in every field).
SERIES_JOBS = 1000
SERIES_POINTS = 120
SERIES_FIELDS = ("gpu_util_pct", "rss_kib", "cpu_s", "gpus", "nodes")


class UtilisationHistory:
    def __init__(self, step_s: float = UTILISATION_STEP_S, keep: int = UTILISATION_KEEP) -> None:
        self.step_s = step_s
        self._samples: deque[dict[str, float]] = deque(maxlen=keep)

    def record(self, now: float, gpus_alloc: int, gpus_total: int) -> None:
        sample = {"time": now, "gpus_alloc": gpus_alloc, "gpus_total": gpus_total}
        if self._samples and self._bucket(self._samples[-1]["time"]) == self._bucket(now):
            # The bucket's latest state, from its first time: a plot holds each value until the next sample.
            self._samples[-1] = {**sample, "time": self._samples[-1]["time"]}
        else:
            self._samples.append(sample)

    def samples(self) -> list[dict[str, float]]:
        return list(self._samples)

    def _bucket(self, time_s: float) -> int:
        return int(time_s // self.step_s)


class JobSeries:
    def __init__(self, jobs: int = SERIES_JOBS, points: int = SERIES_POINTS) -> None:
        self._jobs = jobs
        self._points = points
        # Least recently reported first: a job still running keeps its series, one that ended goes first.
        # Points are tuples in SERIES_FIELDS' order after the time (a dict each would cost three times more).
        self._series: OrderedDict[int, deque[tuple[float, ...]]] = OrderedDict()

    def record(self, now: float, usages: Iterable[tuple[int, Mapping[str, Any] | None]]) -> None:
        """`usages`: (job id, its combined usage now, or None when nothing is sampled)."""
        for job_id, usage in usages:
            if usage is None:
                continue
            series = self._series.get(job_id)
            if series is None:
                series = self._series[job_id] = deque(maxlen=self._points)
                while len(self._series) > self._jobs:
                    self._series.popitem(last=False)
            else:
                self._series.move_to_end(job_id)
            point = (now, *(usage.get(name, 0) for name in SERIES_FIELDS))
            if series and series[-1][0] == now:  # several nodes reported in one batch
                series[-1] = point
            else:
                series.append(point)

    def of(self, job_id: int) -> list[dict[str, Any]]:
        return [dict(zip(("time", *SERIES_FIELDS), point, strict=True)) for point in self._series.get(job_id, ())]
