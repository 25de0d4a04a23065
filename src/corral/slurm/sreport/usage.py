"""What sreport's reports add up, from corral's accounting: each job's allocated TRES x the seconds of
its run inside the report's window (a running job counts up to now), per account and user.

Slurm reads hourly rollups; corral reads the jobs themselves, so it rounds the window as Slurm does
(whole hours) and gets the same sums. The cluster's capacity is today's nodes over the part of the window
since the cluster began (as Slurm's rollups begin when the cluster registered): corral keeps no history
of nodes or their down time (Down and PLND Down are 0)."""
from __future__ import annotations

import time
from _collections_abc import Iterable, Mapping, Sequence

from corral.slurm.common.record import Record
from corral.slurm.common.timespec import midnight, parse_time
from corral.slurm.common.tres import allocated_amounts

HOUR_S = 3600
ROOT = "root"


class Window(Record):
    start: float
    end: float

    @property
    def seconds(self) -> int:
        return int(self.end - self.start)


class Usage(Record):
    user: str
    account: str
    seconds: Mapping[str, float]  # TRES name -> TRES-seconds in the window


def _hour_floor(moment: float) -> float:
    t = time.localtime(moment)
    return time.mktime((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, 0, 0, 0, 0, -1))


def report_window(start_text: str | None, end_text: str | None, now: float) -> Window:
    """slurmdb_report_set_start_end_time: the end defaults to today's midnight and never passes now,
    the start to the midnight before the end; the start rounds up to an hour, the end down, and a
    window is at least an hour."""
    end = min(parse_time(end_text, now) if end_text else midnight(now), now)
    end = _hour_floor(end)
    if start_text:
        start = parse_time(start_text, now)
        start = start if _hour_floor(start) == start else _hour_floor(start) + HOUR_S
    else:
        start = midnight(end - 1)
    if end - start < HOUR_S:
        end = start + HOUR_S
    return Window(start, end)


def reported_seconds(window: Window, created_at: float | None) -> int:
    """The seconds of the window the cluster existed in: none before it began (`created_at`, GET /health's;
    None: unknown, so the whole window)."""
    if created_at is None:
        return window.seconds
    return max(0, int(window.end - max(window.start, created_at)))


def node_tres(nodes: Iterable[Mapping]) -> dict[str, int]:
    nodes = list(nodes)
    cpus = sum(int(n.get("cpus", 0)) for n in nodes)
    return {"cpu": cpus, "mem": sum(int(n.get("mem_mib", 0)) for n in nodes), "node": len(nodes), "billing": cpus,
            "gres/gpu": sum(len(n.get("gpus", ())) for n in nodes)}


def job_usage(jobs: Iterable[Mapping], window: Window, now: float) -> list[Usage]:
    out = []
    for job in jobs:
        started = job.get("start_time")
        if started is None:
            continue
        ended = job.get("end_time")
        seconds = min(now if ended is None else ended, window.end) - max(started, window.start)
        if seconds > 0:
            out.append(Usage(job.get("user", ""), job.get("account") or "", {
                name: amount * seconds for name, amount in allocated_amounts(job).items()}))
    return out


def add(total: dict[str, float], seconds: Mapping[str, float]) -> None:
    for name, value in seconds.items():
        total[name] = total.get(name, 0.0) + value


class Tree(Record):
    """The account tree from the tenancy document; an account it does not name hangs from the root."""

    parent: Mapping[str, str]

    @classmethod
    def of(cls, accounts: Sequence[Mapping], used: Iterable[str]) -> Tree:
        parent = {a["name"]: a.get("parent") or ROOT for a in accounts if a["name"] != ROOT}
        for name in used:
            if name != ROOT:
                parent.setdefault(name, ROOT)
        return cls(parent)

    def children(self, name: str) -> list[str]:
        return sorted(a for a, p in self.parent.items() if p == name)

    def ancestors(self, name: str) -> list[str]:
        """`name` and every account above it, the root last."""
        chain = [name]
        while chain[-1] != ROOT and len(chain) <= len(self.parent) + 1:
            chain.append(self.parent.get(chain[-1], ROOT))
        return chain
