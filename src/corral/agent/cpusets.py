"""Which CPUs of this node each job gets (the controller only says how many).

The agent hands out concrete CPU ids from those it may use itself (its affinity, which its cpuset bounds),
lowest free first, and takes them back when the job's cgroup is gone. A job asking for more CPUs than are
free is not failed (the controller may count CPUs differently, e.g. with several agents on one host): it
gets every CPU of the agent, shared, and the log says why. No core or NUMA preference is made.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's list format ("0-3,8,10-11") as ids."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpu_list(cpus: Iterable[int]) -> str:
    """Ids in the kernel's list format, ranges joined: [0, 1, 2, 5] -> "0-2,5"."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


class CpuAllocator:
    def __init__(self, cpus: Iterable[int]) -> None:
        self.cpus = tuple(sorted(set(cpus)))
        self._held: dict[int, tuple[int, ...]] = {}  # job -> its own CPUs (not those shared on overcommit)
        self._shared: set[int] = set()  # jobs given every CPU because too few were free

    def take(self, job_id: int, count: int) -> tuple[int, ...]:
        """The job's CPUs, chosen on its first call (the same ones afterwards)."""
        if job_id in self._held:
            return self._held[job_id]
        if job_id in self._shared:
            return self.cpus
        used = {cpu for cpus in self._held.values() for cpu in cpus}
        free = [cpu for cpu in self.cpus if cpu not in used]
        if count > len(free):
            log.warning("job %d: %d CPU(s) asked, %d of the agent's %d free: it shares all of them (%s)",
                        job_id, count, len(free), len(self.cpus), format_cpu_list(self.cpus))
            self._shared.add(job_id)
            return self.cpus
        self._held[job_id] = tuple(free[:max(count, 1)])
        return self._held[job_id]

    def hold(self, job_id: int, cpus: Iterable[int]) -> None:
        """Mark a job's CPUs used (a job cgroup found at start, left by an earlier agent)."""
        mine = tuple(sorted(set(cpus) & set(self.cpus)))
        if mine:
            self._held[job_id] = mine

    def release(self, job_id: int) -> None:
        self._held.pop(job_id, None)
        self._shared.discard(job_id)
