"""Hand-made accounting records (GET /accounting's JobOut bodies) and a small live configuration, for
`corral advise`'s pure parts (sim/whatif.py, cli/advise_summary.py)."""
from __future__ import annotations

from corral.api.schemas import JobOut

T0 = 1_700_000_000.0
HOUR = 3600.0


def record(job_id: int, submit: float, start: float | None, runtime: float | None, *, user: str = "alice",
           account: str = "a", queue: str = "qa", gpus: int = 4, limit_s: int = 7200, **overrides) -> dict:
    """A job submitted `submit` s after T0 that started at `start` (None: never) and ran `runtime` s (None:
    still running)."""
    end = None if start is None or runtime is None else T0 + start + runtime
    body = dict(
        id=job_id, name=f"job{job_id}", user=user, state="COMPLETED" if end is not None else "RUNNING",
        reason="None", partition="gpu", priority=0, submit_time=T0 + submit,
        start_time=None if start is None else T0 + start, end_time=end, estimated_start=None,
        time_limit_s=limit_s, elapsed_s=runtime or 0.0, num_nodes=1, tasks_per_node=1, num_tasks=1,
        gpus_per_node=gpus, cpus_per_task=4, mem_per_node_mib=1000, total_gpus=gpus, nodelist="", slices=[],
        exit_code=0, exit_signal=0, gpu_seconds=gpus * (runtime or 0.0), workdir="/tmp", output="", error=None,
        restart_count=0, account=account, qos="normal", queue=queue)
    body.update(overrides)
    return JobOut.model_validate(body).model_dump()


def two_queue_tenancy(cohort: str | None = None) -> dict:
    """Accounts a (alice) and b (bob), each with a quota queue of 4 GPUs, in `cohort` (None: in none)."""
    return {"accounts": [{"name": "a"}, {"name": "b"}],
            "users": [{"name": "alice", "accounts": ["a"]}, {"name": "bob", "accounts": ["b"]}],
            "queues": [{"name": "qa", "cohort": cohort, "accounts": ["a"], "nominal": {"gpu": 4}},
                       {"name": "qb", "cohort": cohort, "accounts": ["b"], "nominal": {"gpu": 4}}]}


def live_bodies(nodes: int = 2, gpus: int = 4, tenancy: dict | None = None, placement: str = "bestfit") -> dict:
    """GET /nodes, /partitions, /tenancy and /scheduler of a cluster of `nodes` nodes of `gpus` GPUs."""
    names = [f"node{i}" for i in range(1, nodes + 1)]
    return {
        "nodes": [{"name": name, "gpus": [{"index": k, "model": "NVIDIA H100", "memory_mib": 81559, "domain": None,
                                          "allocated_to": None} for k in range(gpus)],
                   "cpus": 32, "mem_mib": 100_000} for name in names],
        "partitions": [{"name": "gpu", "default": True, "up": True, "max_time_s": None, "default_time_s": 3600,
                        "nodes": names}],
        "tenancy": tenancy if tenancy is not None else two_queue_tenancy(),
        "scheduler": {"placement": placement, "backfill": True, "max_reservations": 8, "max_jobs_considered": None,
                      "fgd_cpu_weight": 0.5,
                      "task_mix": [] if placement == "bestfit" else [{"gpus": 1, "gpu_milli": 1000, "cpus": 4,
                                                                      "gpu_model": "", "weight": 1.0}]},
    }


def overloaded_queue(jobs: int = 20) -> list[dict]:
    """alice's queue qa (4 GPUs) gets `jobs` jobs of 4 GPUs at once, each an hour long: they run one after
    the other (job i waits i hours); bob's queue qb, as large, runs nothing."""
    return [record(i + 1, 0, i * HOUR, HOUR) for i in range(jobs)]
