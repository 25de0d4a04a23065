"""Which CPUs of this node each job gets (the controller only says how many).

The agent hands out concrete CPU ids from those it may use itself (its affinity, which its cpuset bounds),
lowest free first but whole cores first (hyperthreads of one core go to one job where the count allows), and
takes them back when the job's cgroup is gone. A job asking for more CPUs than are free is not failed (the
controller may count CPUs differently, e.g. with several agents on one host): it gets every CPU of the
agent, shared, and the log says why. No NUMA preference is made.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

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


def host_cores(cpus: Iterable[int], sysfs: Path = Path("/sys/devices/system/cpu")) -> dict[int, tuple[int, int]]:
    """Each CPU's core, as (package, core id), from sysfs; a CPU it does not describe is a core of its own."""
    cores = {}
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            cores[cpu] = (int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text()))
        except (OSError, ValueError):
            cores[cpu] = (-1, -1 - cpu)
    return cores


class CpuAllocator:
    def __init__(self, cpus: Iterable[int], cores: Mapping[int, object] | None = None) -> None:
        self.cpus = tuple(sorted(set(cpus)))
        self._core_of = {cpu: (cores or {}).get(cpu, ("cpu", cpu)) for cpu in self.cpus}
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
        self._held[job_id] = self._pick(free, max(count, 1))
        return self._held[job_id]

    def _pick(self, free: list[int], count: int) -> tuple[int, ...]:
        """`count` of the `free` CPUs: whole free cores that fit first (lowest first), then the lowest left
        on cores already split, then on whole ones (which stay whole for the next job where possible)."""
        cores: dict[object, list[int]] = {}
        for cpu in self.cpus:
            cores.setdefault(self._core_of[cpu], []).append(cpu)
        whole = [siblings for siblings in cores.values() if all(cpu in free for cpu in siblings)]
        chosen: list[int] = []
        for siblings in whole:
            if len(chosen) + len(siblings) <= count:
                chosen += siblings
        in_whole = {cpu for siblings in whole for cpu in siblings}
        rest = sorted((cpu for cpu in free if cpu not in chosen), key=lambda cpu: (cpu in in_whole, cpu))
        return tuple(sorted(chosen + rest[:count - len(chosen)]))

    def hold(self, job_id: int, cpus: Iterable[int]) -> None:
        """Mark a job's CPUs used (a job cgroup found at start, left by an earlier agent)."""
        mine = tuple(sorted(set(cpus) & set(self.cpus)))
        if mine:
            self._held[job_id] = mine

    def release(self, job_id: int) -> None:
        self._held.pop(job_id, None)
        self._shared.discard(job_id)
