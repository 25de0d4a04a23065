"""Multifactor priority (Slurm's model): weighted age, fair-share, job-size, partition and QOS factors,
each in [0, 1], summed; minus the job's nice value (JobSpec.priority is added as an admin adjustment)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from corral.api.tenancy import PriorityWeights
from corral.engine.records import Job
from corral.engine.tenancy import Tenancy

YEAR_S = 365 * 86400


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


def job_size(job: Job, w: PriorityWeights, cluster_gpus: int) -> float:
    """The job-size factor in [0, 1] (see PriorityWeights.job_size_basis and favor_small)."""
    req = job.spec.request
    if not cluster_gpus:
        return 0.0
    if w.job_size_basis == "gpu_time":
        asked = req.total_gpus * req.time_limit_s
        size = min(1.0, math.log1p(asked) / math.log1p(cluster_gpus * YEAR_S))
    else:
        size = min(1.0, req.total_gpus / cluster_gpus)
    return 1.0 - size if w.favor_small else size


def job_priority(job: Job, now: float, tenancy: Tenancy, fairshare: dict[str, float], cluster_gpus: int,
                 partition_factors: dict[str, float]) -> Factors:
    """`partition_factors`: each partition's normalized factor (EngineConfig.partition_factors)."""
    w = tenancy.spec.priority
    age = min(1.0, max(0.0, now - job.submit_time) / w.max_age_s)
    share = fairshare.get(job.spec.account, 1.0)
    size = job_size(job, w, cluster_gpus)
    qos = tenancy.qos_of(job.spec)
    qos_factor = qos.priority / tenancy.max_qos_priority if tenancy.max_qos_priority else 0.0
    partition = partition_factors.get(job.spec.request.partition, 0.0)
    return Factors(
        age=round(w.weight_age * age), fairshare=round(w.weight_fairshare * share),
        job_size=round(w.weight_job_size * size), partition=round(w.weight_partition * partition),
        qos=round(w.weight_qos * qos_factor), nice=job.spec.priority,
    )
