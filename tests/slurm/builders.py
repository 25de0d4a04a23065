"""Small builders of corral records (JobOut/NodeOut/PartitionOut dicts) for table tests."""
from __future__ import annotations

T0 = 1_800_000_000.0  # a fixed "now" for tests


def job(job_id: int = 1, **fields) -> dict:
    record = {
        "id": job_id, "name": "train", "user": "ada", "uid": 1000, "state": "PENDING", "reason": "Priority",
        "partition": "gpu", "priority": 100, "submit_time": T0 - 600, "start_time": None, "end_time": None,
        "estimated_start": None, "time_limit_s": 3600, "elapsed_s": 0.0, "num_nodes": 1, "tasks_per_node": 1,
        "num_tasks": 1, "gpus_per_node": 0, "cpus_per_task": 1, "mem_per_node_mib": 0, "total_gpus": 0,
        "nodelist": "", "slices": [], "exit_code": 0, "exit_signal": 0, "gpu_seconds": 0.0, "workdir": "/home/ada",
        "output": "/home/ada/slurm-%j.out", "error": None, "restart_count": 0,
    }
    record.update(fields)
    return record


def running(job_id: int = 1, nodes: tuple[str, ...] = ("n1",), started_s_ago: float = 65, **fields) -> dict:
    slices = [{"node": n, "gpus": list(range(fields.get("gpus_per_node", 0))), "cpus": 1, "mem_mib": 0}
              for n in nodes]
    from corral import hostlist
    return job(job_id, state="RUNNING", reason="None", start_time=T0 - started_s_ago, num_nodes=len(nodes),
               nodelist=hostlist.compress(list(nodes)), slices=slices, **fields)


def node(name: str, state: str = "idle", cpus: int = 16, cpus_alloc: int = 0, gpus: int = 8, **fields) -> dict:
    record = {"name": name, "state": state, "address": name, "partitions": ["gpu"], "cpus": cpus,
              "cpus_alloc": cpus_alloc, "mem_mib": 64000, "mem_alloc_mib": 0,
              "gpus": [{"index": i, "model": "sim", "memory_mib": 0, "domain": None, "allocated_to": None}
                       for i in range(gpus)], "gpus_alloc": 0, "drain_reason": "", "last_seen": T0}
    record.update(fields)
    return record


def partition(name: str = "gpu", nodes: tuple[str, ...] = ("n1", "n2"), **fields) -> dict:
    record = {"name": name, "default": True, "up": True, "max_time_s": None, "default_time_s": 3600,
              "nodes": list(nodes)}
    record.update(fields)
    return record
