"""Kueue-style quota: queues with nominal quota that lend to and borrow from their cohort.

For each queue q and resource r: `lendable = min(nominal, lending_limit)` (all of nominal if no limit) is
what q puts into its cohort's pool, and `guaranteed = nominal - lendable` is what only q may use. q's usage
beyond its guaranteed part draws on the pool. A job fits if q stays within nominal + borrowing_limit and
the cohort's pooled usage stays within the sum of lendable quota. A queue without a cohort is limited to
its nominal quota. A queue that needs its nominal quota back gets it by preempting jobs of queues that
are borrowing (see preemption.py).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

from corral.core.fgd import model_matches
from corral.core.model import QueueQuota, RunningJob


def job_resources(gpus: float, cpus: int, mem_mib: int, gpu_model: str = "") -> dict[str, float]:
    out = {"gpu": gpus, "cpu": cpus, "mem_mib": mem_mib}
    if gpu_model:
        out[f"gpu:{gpu_model}"] = gpus
    return out


class QuotaBook:
    """Quota usage for one cycle; `charge` with sign -1 undoes, for what-if preemption."""

    def __init__(self, queues: Iterable[QueueQuota], running: Iterable[RunningJob]) -> None:
        self.queues = {q.name: q for q in queues}
        # queue -> GPU models it has flavors for, in the order listed
        self.flavors = {q.name: [r[4:] for r in q.nominal if r.startswith("gpu:")] for q in self.queues.values()}
        self._flavor_memo: dict[tuple[str, str], str | None] = {}
        self.usage: dict[str, dict[str, float]] = {name: {r: 0 for r in q.nominal} for name, q in self.queues.items()}
        self.capacity: dict[str, dict[str, float]] = {}
        self.pooled: dict[str, dict[str, float]] = {}
        for q in self.queues.values():
            if q.cohort is None:
                continue
            cap = self.capacity.setdefault(q.cohort, {})
            self.pooled.setdefault(q.cohort, {})
            for r in q.nominal:
                cap[r] = cap.get(r, 0) + self._lendable(q, r)
                self.pooled[q.cohort].setdefault(r, 0)
        # Sum per queue first: one charge per queue instead of one per running job.
        totals: dict[str, dict[str, float]] = {}
        for job in running if self.queues else ():
            if job.queue in self.queues:
                total = totals.setdefault(job.queue, {})
                for r, amount in job.resources.items():
                    total[r] = total.get(r, 0) + amount
        for queue, total in totals.items():
            self.charge(queue, total)
        # Queues borrowing when the cycle began. Reclaim takes only from these: a queue that starts
        # borrowing within the cycle does so with capacity idle right now, and preempting its older
        # jobs for that would trade running work for running work.
        self.borrowing_at_start = frozenset(name for name in self.queues if self.borrowing(name))

    @staticmethod
    def _lendable(q: QueueQuota, r: str) -> int:
        return min(q.nominal[r], q.lending_limit.get(r, q.nominal[r]))

    def _pooled_part(self, q: QueueQuota, r: str, used: float) -> float:
        return max(0, used - (q.nominal[r] - self._lendable(q, r)))

    def charge(self, queue: str, amounts: dict[str, float], sign: int = 1) -> None:
        q = self.queues.get(queue)
        if q is None:
            return
        if self.flavors[queue]:
            amounts = self._in_flavors(queue, amounts)
        usage = self.usage[queue]
        for r in q.nominal:
            before = usage[r]
            usage[r] = before + sign * amounts.get(r, 0)
            if q.cohort is not None:
                pool = self.pooled[q.cohort]
                pool[r] += self._pooled_part(q, r, usage[r]) - self._pooled_part(q, r, before)

    def _in_flavors(self, queue: str, amounts: dict[str, float]) -> dict[str, float]:
        """A running job holds `gpu:<its devices' model>` (`NVIDIA H100 80GB HBM3`): that counts against
        the first of the queue's flavors the model answers to (`gpu:h100`)."""
        nominal = self.queues[queue].nominal
        out = amounts
        for r, amount in amounts.items():
            if not r.startswith("gpu:") or r in nominal:
                continue
            flavor = self._flavor_of(queue, r[4:])
            if flavor is not None:
                if out is amounts:
                    out = dict(amounts)
                del out[r]
                out[flavor] = out.get(flavor, 0) + amount
        return out

    def _flavor_of(self, queue: str, model: str) -> str | None:
        pair = (queue, model)
        if pair not in self._flavor_memo:
            self._flavor_memo[pair] = next(
                (f"gpu:{flavor}" for flavor in self.flavors[queue] if model_matches(model, flavor)), None)
        return self._flavor_memo[pair]

    def shortfall(self, queue: str, amounts: dict[str, float]) -> str | None:
        """None if the job fits the queue's quota now; else which quota stops it, in words."""
        q = self.queues.get(queue)
        if q is None:
            return None
        for r, nominal in q.nominal.items():
            need = amounts.get(r, 0)
            if need == 0:
                continue
            used = self.usage[queue][r]
            if q.cohort is None:
                if used + need > nominal:
                    return f"queue {queue}: {r} {used}+{need} over nominal quota {nominal}"
                continue
            ceiling = nominal + q.borrowing_limit.get(r, math.inf)
            if used + need > ceiling:
                return f"queue {queue}: {r} {used}+{need} over nominal {nominal} + borrowing limit"
            pool = self.pooled[q.cohort][r]
            grow = self._pooled_part(q, r, used + need) - self._pooled_part(q, r, used)
            capacity = self.capacity[q.cohort][r]
            if pool + grow > capacity:
                return (f"cohort {q.cohort}: {r} {capacity - pool} of {capacity} free in the shared pool, "
                        f"{grow} needed")
        return None

    def within_nominal(self, queue: str, amounts: dict[str, float]) -> bool:
        """Would the queue stay within its nominal quota with this job? (Then it may reclaim.)"""
        q = self.queues.get(queue)
        if q is None or q.cohort is None:
            return False
        return all(self.usage[queue][r] + amounts.get(r, 0) <= n for r, n in q.nominal.items())

    def borrowing(self, queue: str) -> bool:
        q = self.queues.get(queue)
        return q is not None and any(self.usage[queue][r] > n for r, n in q.nominal.items())

    def same_cohort(self, a: str, b: str) -> bool:
        qa, qb = self.queues.get(a), self.queues.get(b)
        return qa is not None and qb is not None and qa.cohort is not None and qa.cohort == qb.cohort
