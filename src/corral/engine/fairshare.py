"""Fair share: resource usage decayed with a half-life, over the account tree (Slurm's classic factor).

Usage accrues per account as running jobs hold resources: billing-seconds = sum over resources of
weight x amount x seconds (by default one unit per GPU-second). All usage decays by half every
`half_life_s`. An account's normalized shares are its shares among its siblings times its parent's;
its normalized usage is its (subtree's) decayed usage over everyone's. The factor is
2^(-normalized usage / normalized shares): 1 with no usage, 0.5 when usage matches the share, toward 0
above it.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from corral.api.tenancy import TenancySpec
from corral.engine.records import Job


class FairShare:
    def __init__(self, spec: TenancySpec, usage: dict[str, float] | None = None, as_of: float = 0.0,
                 charged_to: float | None = None) -> None:
        self.configure(spec)
        self.usage: dict[str, float] = dict(usage or {})
        self.as_of = as_of
        # Running jobs already charged, all of them up to `_live_to`: id -> (account, billing rate), and
        # the rates summed per account, so that an accrual costs one step per account, not per job (a
        # 400-job cluster accrued every 30 s for two months made per-job charging a third of a replay).
        self._live: dict[int, tuple[str, float]] = {}
        self._live_to = as_of
        # Restored usage holds every running job's charges up to here (see state()).
        self._restored_as_of = as_of if charged_to is None else charged_to
        self._account_rates: dict[str, float] = {}

    def configure(self, spec: TenancySpec) -> None:
        self.half_life_s = spec.priority.half_life_s
        self.billing = dict(spec.priority.billing)
        self.parent = {a.name: a.parent for a in spec.accounts}
        self.shares = {a.name: a.shares for a in spec.accounts}
        self._norm_shares = self._normalize_shares()

    def _normalize_shares(self) -> dict[str, float]:
        siblings: dict[str | None, int] = {}
        for name, parent in self.parent.items():
            siblings[parent] = siblings.get(parent, 0) + self.shares[name]
        norm: dict[str, float] = {}

        def of(name: str) -> float:
            if name not in norm:
                parent = self.parent[name]
                above = 1.0 if parent is None else of(parent)
                norm[name] = above * self.shares[name] / siblings[parent]
            return norm[name]

        for name in self.parent:
            of(name)
        return norm

    # ----- usage

    def decay_to(self, now: float) -> None:
        if now <= self.as_of:
            return
        factor = 0.5 ** ((now - self.as_of) / self.half_life_s)
        for account in self.usage:
            self.usage[account] *= factor
        self.as_of = now

    def accrue(self, jobs: Iterable[Job], now: float) -> None:
        """Charge running jobs' accounts for the time since the last call."""
        if now < self._live_to:
            return
        jobs = list(jobs)  # walked twice when a job left unannounced
        self.decay_to(now)
        seen, joining = 0, []
        for job in jobs:
            if job.id in self._live:
                seen += 1
            elif job.start_time is not None:
                joining.append(job)
        if seen < len(self._live):  # a job left without charge_job: it stops accruing, unbilled
            for gone in self._live.keys() - {job.id for job in jobs}:
                self._leave(gone)
        span = self._decayed(now - self._live_to)
        for account, rate in self._account_rates.items():
            self.usage[account] = self.usage.get(account, 0.0) + rate * span
        self._live_to = now
        for job in joining:
            self._charge_since_start(job, now)
            self._join(job)

    def charge_job(self, job: Job, now: float) -> None:
        """Charge a job's last stretch as its run ends, and forget it."""
        self.decay_to(now)
        entry = self._leave(job.id)
        if entry is None:
            self._charge_since_start(job, now)
        else:
            account, rate = entry
            self.usage[account] = self.usage.get(account, 0.0) + rate * self._decayed(max(0.0, now - self._live_to))

    def _join(self, job: Job) -> None:
        rate = self._billing_rate(job)
        self._live[job.id] = (job.spec.account, rate)
        self._account_rates[job.spec.account] = self._account_rates.get(job.spec.account, 0.0) + rate

    def _leave(self, job_id: int) -> tuple[str, float] | None:
        entry = self._live.pop(job_id, None)
        if entry is not None:
            account, rate = entry
            left = self._account_rates.get(account, 0.0) - rate
            if left > 1e-9:
                self._account_rates[account] = left
            else:
                self._account_rates.pop(account, None)
        return entry

    def _charge_since_start(self, job: Job, now: float) -> None:
        """A job not yet charged: its run so far, but never before the usage's own time (after a
        restart, what ran before `as_of` is already in the restored usage)."""
        if job.start_time is None:
            return
        seconds = now - max(job.start_time, self._restored_as_of)
        if seconds > 0:
            # Usage earned over the stretch decays as it is earned: integrate 2^(-(now-t)/h) dt.
            earned = self._billing_rate(job) * self._decayed(seconds)
            self.usage[job.spec.account] = self.usage.get(job.spec.account, 0.0) + earned

    def _decayed(self, seconds: float) -> float:
        k = math.log(2) / self.half_life_s
        return (1 - math.exp(-k * seconds)) / k

    def _billing_rate(self, job: Job) -> float:
        amounts = {"gpu": job.gpu_count, "cpu": sum(s.cpus for s in job.slices),
                   "mem_mib": sum(s.mem_mib for s in job.slices)}
        return sum(weight * amounts.get(r, 0) for r, weight in self.billing.items())

    # ----- factors

    def subtree_usage(self) -> dict[str, float]:
        total: dict[str, float] = {}
        for account, used in self.usage.items():
            cur: str | None = account
            while cur is not None:
                total[cur] = total.get(cur, 0.0) + used
                cur = self.parent.get(cur)
        return total

    def factors(self) -> dict[str, float]:
        """Fair-share factor of every configured account."""
        rolled = self.subtree_usage()
        everyone = sum(u for a, u in self.usage.items())
        out = {}
        for account, share in self._norm_shares.items():
            norm_usage = rolled.get(account, 0.0) / everyone if everyone > 0 else 0.0
            out[account] = 2.0 ** (-norm_usage / share) if share > 0 else 0.0
        return out

    def report(self) -> list[dict[str, Any]]:
        rolled = self.subtree_usage()
        everyone = sum(self.usage.values())
        factors = self.factors()
        return [{"account": a, "parent": self.parent[a], "shares": self.shares[a],
                 "norm_shares": self._norm_shares[a], "raw_usage": rolled.get(a, 0.0),
                 "norm_usage": rolled.get(a, 0.0) / everyone if everyone > 0 else 0.0,
                 "fairshare": factors[a]} for a in sorted(self.parent)]

    def state(self) -> dict[str, Any]:
        return {"as_of": self.as_of, "usage": self.usage, "charged_to": self._live_to if self._live else self.as_of}
