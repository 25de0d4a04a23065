"""The spine's 100,000-pending-job cycle with tenancy on: 50 queues in 5 cohorts (nominal quota that lends
and borrows), 200 accounts with fair share, per-user running-job limits. Priorities come from the engine's
multifactor code with decayed usage; the cycle is the same core `schedule` the controller runs."""
from __future__ import annotations

import gc
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import cluster_snapshot  # noqa: E402

from corral.api.tenancy import TenancySpec  # noqa: E402
from corral.core.config import SchedulerConfig  # noqa: E402
from corral.core.model import Cap, PendingJob, Reason  # noqa: E402
from corral.core.scheduler import schedule  # noqa: E402
from corral.engine.fairshare import FairShare  # noqa: E402

QUEUES, COHORTS, ACCOUNTS = 50, 5, 200


def tenancy() -> TenancySpec:
    accounts = [{"name": f"acct{i:03d}", "shares": 1 + i % 4} for i in range(ACCOUNTS)]
    queues = [{"name": f"q{i:02d}", "cohort": f"cohort{i % COHORTS}", "nominal": {"gpu": 8000 // QUEUES},
               "accounts": [f"acct{a:03d}" for a in range(ACCOUNTS) if a % QUEUES == i]} for i in range(QUEUES)]
    return TenancySpec(accounts=accounts, queues=queues)


def tenant_snapshot(pending: int, seed: int = 1):
    base = cluster_snapshot(1000, pending, seed=seed)
    rng = random.Random(seed)
    spec = tenancy()
    fair = FairShare(spec, {f"acct{i:03d}": rng.uniform(0, 1e6) for i in range(ACCOUNTS)}, as_of=base.now)
    shares = fair.factors()
    running = tuple(replace(r, queue=f"q{r.id % QUEUES:02d}", charges=((f"user:u{r.id % 400}:jobs", 1),))
                    for r in base.running)
    jobs = []
    for job in base.pending:
        account = f"acct{job.id % ACCOUNTS:03d}"
        queue = f"q{job.id % ACCOUNTS % QUEUES:02d}"
        user = f"u{job.id % 400}"
        priority = round(10000 * shares[account] + 1000 * rng.random())
        jobs.append(PendingJob(job.id, priority, job.submit_time, job.request, user=user, account=account,
                               queue=queue, caps=(Cap(f"user:{user}:jobs", 50, 1, Reason.ASSOC_MAX_JOBS),)))
    queues = tuple(_quota(q) for q in spec.queues)
    return replace(base, running=running, pending=tuple(jobs), queues=queues), fair


def _quota(q):
    from corral.core.model import QueueQuota

    return QueueQuota(q.name, dict(q.nominal), q.cohort)


def measure(pending: int = 100_000, repeats: int = 5) -> dict:
    snap, fair = tenant_snapshot(pending)
    t0 = time.perf_counter()
    fair.factors()
    factors_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        plan = schedule(snap, SchedulerConfig())
        times.append(time.perf_counter() - t0)
    reasons: dict[str, int] = {}
    for w in plan.waiting:
        reasons[w.reason.value] = reasons.get(w.reason.value, 0) + 1
    return {"bench": "tenancy-cycle", "nodes": 1000, "pending": pending, "queues": QUEUES, "cohorts": COHORTS,
            "accounts": ACCOUNTS, "median_s": round(statistics.median(times), 4), "min_s": round(min(times), 4),
            "started": plan.stats["started"], "preempted": plan.stats["preempted"],
            "fairshare_factors_s": round(factors_s, 5), "reasons": reasons}


if __name__ == "__main__":
    print(json.dumps(measure()))
