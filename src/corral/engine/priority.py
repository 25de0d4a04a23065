"""Multifactor priority (Slurm's model): weighted age, fair-share, job-size, partition and QOS factors,
each in [0, 1], summed; minus the job's nice value (JobSpec.priority is added as an admin adjustment)."""
from __future__ import annotations

from dataclasses import dataclass

from corral.engine.records import Job
from corral.engine.tenancy import Tenancy


@dataclass(frozen=True, slots=True)
class Factors:
    age: int
    fairshare: int
    job_size: int
    partition: int
    qos: int
    nice: int

    @property
    def total(self) -> int:
        return max(0, self.age + self.fairshare + self.job_size + self.partition + self.qos + self.nice)


def job_priority(job: Job, now: float, tenancy: Tenancy, fairshare: dict[str, float], cluster_gpus: int,
                 partition_tier: float = 0.0) -> Factors:
    w = tenancy.spec.priority
    age = min(1.0, max(0.0, now - job.submit_time) / w.max_age_s)
    share = fairshare.get(job.spec.account, 1.0)
    size = min(1.0, job.spec.request.total_gpus / cluster_gpus) if cluster_gpus else 0.0
    qos = tenancy.qos_of(job.spec)
    qos_factor = qos.priority / tenancy.max_qos_priority if tenancy.max_qos_priority else 0.0
    return Factors(
        age=round(w.weight_age * age), fairshare=round(w.weight_fairshare * share),
        job_size=round(w.weight_job_size * size), partition=round(w.weight_partition * partition_tier),
        qos=round(w.weight_qos * qos_factor), nice=job.spec.priority,
    )
