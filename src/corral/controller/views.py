"""Turn engine records into API bodies and agent messages."""
from __future__ import annotations

from corral import container_options, hostlist
from corral.api.schemas import GpuOut, JobOut, NodeOut, PartitionOut, SliceOut
from corral.controller.step_views import share_launch, step_rows
from corral.controller.usage_views import LiveOfJob, PerNode, gpu_idle_flagged, job_usage
from corral.engine.arrays import parse_array
from corral.engine.config import EngineConfig
from corral.engine.history import Cancelled, history_to_json
from corral.engine.membership import node_state
from corral.engine.records import Job, JobState, Node
from corral.protocol import ContainerLaunch, LaunchJob, TaskLaunch
from corral.sim.forecast import START_WINDOW, StartWindow


def job_out(job: Job, now: float, live: LiveOfJob | None = None, forecast: float | None = None, *,
            gpu_idle_flag_s: float, window: StartWindow = START_WINDOW) -> JobOut:
    """`live`: the latest samples of the running job's tasks and steps (usage_views.LiveUsage.of).
    `forecast`: the job's forecast start (controller/forecasts.py), shown instead of the reservation's
    estimate while it is pending (never in the past: a job not started yet starts now at the earliest).
    `gpu_idle_flag_s`: the config's; a job whose GPUs stayed idle that long is flagged. `window`: the
    start window put around a forecast (the live one is calibrated online: Forecasts.window)."""
    live = live or {}
    usage = job_usage(job, live.get(None))
    req = job.spec.request
    estimate, source = job.estimated_start, "reservation" if job.estimated_start is not None else None
    shown_window = None
    if forecast is not None and job.state is JobState.PENDING:
        estimate, source = max(forecast, now), "forecast"
        shown_window = list(window.bounds(now, estimate))
    if job.start_time is None:
        elapsed = 0.0
    else:
        elapsed = (job.end_time if job.end_time is not None else now) - job.start_time
    return JobOut(
        id=job.id, name=job.spec.name, user=job.spec.user, state=job.state.value, reason=job.reason,
        partition=req.partition, priority=job.spec.priority, submit_time=job.submit_time,
        start_time=job.start_time, end_time=job.end_time, estimated_start=estimate,
        estimated_start_source=source, estimated_start_window=shown_window,
        time_limit_s=req.time_limit_s, elapsed_s=max(0.0, elapsed), num_nodes=req.num_nodes,
        tasks_per_node=req.tasks_per_node, num_tasks=req.num_nodes * req.tasks_per_node,
        gpus_per_node=req.gpus_per_node, cpus_per_task=req.cpus_per_task, mem_per_node_mib=req.mem_per_node_mib,
        total_gpus=req.total_gpus, nodelist=hostlist.compress(job.node_names) if job.slices else "",
        slices=[SliceOut(node=s.node, gpus=list(s.gpus), cpus=s.cpus, mem_mib=s.mem_mib, gpu_milli=s.gpu_milli)
                for s in job.slices],
        gpu_share=job.spec.gpu_share,
        exit_code=job.exit_code, exit_signal=job.exit_signal,
        gpu_seconds=job.gpu_seconds if job.end_time is not None else job.prior_gpu_seconds + job.run_gpu_seconds(now),
        workdir=job.spec.workdir, output=job.spec.output, error=job.spec.error, restart_count=job.restart_count,
        account=job.spec.account, qos=job.spec.qos, queue=job.spec.queue, array_job_id=job.spec.array_job_id,
        array_task_id=job.spec.array_task_id, array_throttle=job.spec.array_throttle,
        dependency=job.spec.dependency, reason_detail=job.reason_detail, held=job.held,
        requeue=job.spec.requeue, expedited_requeue=job.spec.expedited_requeue, reservation=job.spec.reservation,
        uid=job.spec.uid,
        submit_host=job.spec.submit_host, history=[history_to_json(entry) for entry in job.history],
        comment=job.spec.comment,
        wckey=job.spec.wckey, open_mode=job.spec.open_mode, batch=job.spec.batch, req_nodelist=job.spec.nodelist,
        exc_nodelist=job.spec.exclude, constraint=job.spec.constraint, exclusive=job.spec.exclusive,
        allocation=job.spec.allocation, **{name: getattr(job.spec, name) for name in container_options.FIELDS},
        cancelled_by_uid=next((h.uid for h in job.history if isinstance(h, Cancelled)), None),
        steps=batch_steps(job, live.get(None)) + step_rows(job, live),
        usage=usage, gpu_idle_flagged=gpu_idle_flagged(usage, gpu_idle_flag_s),
    )


def batch_steps(job: Job, live: PerNode | None = None) -> list[dict]:
    """The batch step of a batch job, as sacct shows it (`N.batch`)."""
    if not job.spec.kind.batch_step or job.start_time is None:
        return []
    first = job.slices[0].node if job.slices else ""
    run = job.runs.get(first)
    ended = run if run is not None and run.finished else None
    return [{"step_id": "batch", "name": "batch", "nodelist": first, "num_tasks": 1,
             "start_time": job.start_time, "end_time": job.end_time if ended else None,
             "state": (job.state.value if job.state.terminal else "RUNNING") if run else "PENDING",
             "exit_code": ended.exit_code if ended else 0, "exit_signal": ended.signal if ended else 0,
             "usage": job_usage(job, live)}]


def node_out(node: Node, usage: tuple[set[int], int, int], owners: dict[int, int]) -> NodeOut:
    gpus, cpus, mem = usage
    return NodeOut(
        name=node.name, state=node_state(node, len(gpus), cpus), address=node.address,
        partitions=sorted(node.partitions), cpus=node.cpus, cpus_alloc=cpus, mem_mib=node.mem_mib,
        mem_alloc_mib=mem,
        gpus=[GpuOut(index=g.index, model=g.model, memory_mib=g.memory_mib, domain=g.domain,
                     allocated_to=owners.get(g.index)) for g in node.gpus],
        gpus_alloc=len(gpus), drain_reason=node.drain_reason, last_seen=node.last_seen,
        run_as_user=node.run_as_user, agent_user=node.agent_user, cgroups=node.cgroups,
        features=sorted(node.features),
    )


def partition_outs(config: EngineConfig, nodes: list[Node]) -> list[PartitionOut]:
    return [
        PartitionOut(name=p.name, default=p is config.default_partition, up=p.up, max_time_s=p.max_time_s,
                     default_time_s=p.default_time_s, nodes=[n.name for n in nodes if p.name in n.partitions],
                     priority_job_factor=p.priority_job_factor)
        for p in config.partitions
    ]


def launch_message(job: Job, node_name: str, nodes: dict[str, Node], cluster_name: str) -> LaunchJob:
    req = job.spec.request
    names = list(job.node_names)
    index = names.index(node_name)
    node_slice = job.slices[index]
    per_task = job.spec.gpus_per_task
    kind = job.spec.kind
    tasks = []
    # The batch step is one task that sees all of the first node's devices.
    for local in range(kind.tasks_on_node(req.tasks_per_node)):
        if per_task and not kind.batch_step:
            devices = list(node_slice.gpus[local * per_task:(local + 1) * per_task])
        else:
            devices = list(node_slice.gpus)
        tasks.append(TaskLaunch(rank=index * req.tasks_per_node + local, local_rank=local, gpus=devices))
    first = nodes.get(names[0])
    return LaunchJob(
        job_id=job.id, job_name=job.spec.name, user=job.spec.user, uid=job.spec.uid, partition=req.partition,
        node_index=index, nodes=names, master_addr=first.address if first else "127.0.0.1",
        master_port=20000 + job.id % 40000, tasks_per_node=req.tasks_per_node,
        num_tasks=req.num_nodes * req.tasks_per_node, cpus_per_task=req.cpus_per_task,
        cpus_on_node=node_slice.cpus, mem_per_node_mib=req.mem_per_node_mib, node_gpus=list(node_slice.gpus),
        gpus_per_task=per_task, share=share_launch(job, node_slice, nodes.get(node_name)), tasks=tasks,
        script=job.spec.script, argv=list(job.spec.argv),
        workdir=job.spec.workdir, env={**job.spec.env, **job_facts(job)}, output=job.spec.output,
        error=job.spec.error, time_limit_s=req.time_limit_s, restart_count=job.restart_count,
        submit_host=job.spec.submit_host, cluster_name=cluster_name, batch=kind.batch_step,
        explicit=[k for k in job.spec.explicit.split(",") if k], open_mode=job.spec.open_mode,
        acctg_freq_s=job.spec.acctg_freq_s,
        container=None if kind.batch_step else ContainerLaunch.of(job.spec),
    )


def job_facts(job: Job) -> dict[str, str]:
    """Slurm variables the launch message has no field for: array, account, QOS."""
    spec = job.spec
    env = {"SLURM_JOB_ACCOUNT": spec.account, "SLURM_JOB_QOS": spec.qos}
    if spec.array_job_id is not None:
        indices, _ = parse_array(spec.array_indices)
        steps = {b - a for a, b in zip(indices, indices[1:], strict=False)}
        env.update({
            "SLURM_ARRAY_JOB_ID": str(spec.array_job_id), "SLURM_ARRAY_TASK_ID": str(spec.array_task_id),
            "SLURM_ARRAY_TASK_COUNT": str(len(indices)), "SLURM_ARRAY_TASK_MIN": str(indices[0]),
            "SLURM_ARRAY_TASK_MAX": str(indices[-1]),
            "SLURM_ARRAY_TASK_STEP": str(steps.pop() if len(steps) == 1 else 1)})
    if spec.reservation:
        env["SLURM_JOB_RESERVATION"] = spec.reservation
    return env
