"""Blue Waters (NCSA): 15,000 jobs with anonymous users and the time limit each user asked for.

`blue_waters_15000.csv` (see shared/traces/README.md) has `u_id,user,gpu_num,cpu_num,node_num,interval,
run_time,wall_time,new_status`: `interval` is seconds since the previous job's submission, `run_time` the
real runtime, `wall_time` the user's time limit, `gpu_num` > 0 on jobs of the XK nodes (one GPU each), 0 on
those of the XE (CPU) nodes. No start times: waits come from a replay.

corral schedules GPUs, so a Blue Waters node is modelled as one schedulable unit (a "GPU" in the engine's
terms) and UNITS_PER_NODE of them make one simulated node; XE and XK are two partitions (`xe`, `xk`). A job
of n Blue Waters nodes gets the fewest simulated nodes that hold n units, spread evenly (rounded up per node
where n does not divide: recorded in the workload's notes). The real machine (26,864 nodes) never queues
this sample (it kept about 6 % of it busy), so `bluewaters_cluster` is a smaller machine that makes jobs
wait; a job larger than its partition there is clamped to the whole partition (counted in the notes).
A runtime past the limit (the trace records a few minutes of overrun on some killed jobs) is cut at the
limit: Slurm and corral end a job at its limit.
"""
from __future__ import annotations

import os
from dataclasses import replace

from corral.sim.traces._csv import TRACES_DIR, Row, iter_rows
from corral.sim.traces.philly import consolidated_shape
from corral.sim.workload import GPU_MILLI_WHOLE, Cluster, TraceJob, Workload

JOBS_PATH = TRACES_DIR / "blue-waters" / "blue_waters_15000.csv"
UNITS_PER_NODE = 32
# The replay machine: units (Blue Waters nodes) per partition, sized so that the sample queues
# (mean demand about 1,400 XE and 270 XK nodes).
XE_UNITS = 1536
XK_UNITS = 320
NODE_CPUS = 64
NODE_MEM_MIB = 256 * 1024

_REQUIRED = ("u_id", "user", "gpu_num", "node_num", "interval", "run_time", "wall_time")


def bluewaters_cluster(xe_units: int = XE_UNITS, xk_units: int = XK_UNITS) -> Cluster:
    """Partitions `xe` and `xk` of UNITS_PER_NODE-unit nodes (each unit one Blue Waters node)."""
    for name, units in (("xe_units", xe_units), ("xk_units", xk_units)):
        if units < UNITS_PER_NODE or units % UNITS_PER_NODE:
            raise ValueError(f"{name}={units}: must be a positive multiple of {UNITS_PER_NODE}")
    return Cluster.uniform("bluewaters", {"xe": xe_units // UNITS_PER_NODE, "xk": xk_units // UNITS_PER_NODE},
                           gpus_per_node=UNITS_PER_NODE, cpus_per_node=NODE_CPUS, mem_per_node_mib=NODE_MEM_MIB,
                           source=f"Blue Waters scaled down: {xe_units} XE + {xk_units} XK nodes, "
                                  f"{UNITS_PER_NODE} per simulated node")


def read_bluewaters(path: str | os.PathLike[str] = JOBS_PATH) -> Workload:
    """Every job of the file; submit_s counts from the first submission, ids are `u_id`."""
    jobs: list[TraceJob] = []
    submit_s = 0.0
    overrun = 0
    for row in iter_rows(path, _REQUIRED):
        submit_s += row.integer("interval")
        job, cut = _job(row, submit_s)
        overrun += cut
        jobs.append(job)
    notes = [f"a Blue Waters node = one unit, {UNITS_PER_NODE} units per simulated node; user = account = the "
             f"trace's user; partition xe (CPU nodes) or xk (GPU nodes)",
             f"{overrun} runtime(s) past the time limit cut at the limit"]
    return Workload(tuple(jobs), "bluewaters", f"{path}: all {len(jobs)} jobs", notes=tuple(notes))


def fit_to(workload: Workload, cluster: Cluster) -> Workload:
    """Clamp jobs larger than their partition to the whole partition (noted)."""
    units = {queue: count * UNITS_PER_NODE for queue, count in cluster.queue_nodes().items()}
    fitted, clamped = [], 0
    for job in workload.jobs:
        capacity = units[job.queue]
        if job.total_gpus > capacity:
            clamped += 1
            job = replace(job, num_nodes=capacity // UNITS_PER_NODE, gpus_per_node=UNITS_PER_NODE)
        fitted.append(job)
    return workload.with_jobs(fitted, f"{clamped} job(s) larger than their partition ({units}) clamped to it")


def _job(row: Row, submit_s: float) -> tuple[TraceJob, bool]:
    units = row.integer("node_num", minimum=1)
    limit = row.integer("wall_time", minimum=1)
    runtime = float(row.integer("run_time"))
    nodes, per_node = consolidated_shape(units, UNITS_PER_NODE)
    partition = "xk" if row.integer("gpu_num") > 0 else "xe"
    user = f"bw{row.integer('user')}"
    return TraceJob(
        id=row.integer("u_id"), submit_s=submit_s, duration_s=min(runtime, float(limit)), num_nodes=nodes,
        gpus_per_node=per_node, gpu_milli=GPU_MILLI_WHOLE, cpus_per_node=1, mem_per_node_mib=0, gpu_model=None,
        user=user, account=user, queue=partition, time_limit_s=limit, name=f"bw-{row.integer('u_id')}",
    ), runtime > limit
