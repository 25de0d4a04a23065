"""Steps as API bodies, sacct rows and agent launch messages."""
from __future__ import annotations

from corral import container_options, hostlist
from corral.api.steps import StepOut
from corral.controller.usage_views import LiveOfJob, step_usage
from corral.core.model import NodeSlice
from corral.engine.records import Job, Node, Step
from corral.protocol import ContainerLaunch, GpuShareLaunch, LaunchStep, TaskLaunch


def step_out(job: Job, step: Step) -> StepOut:
    return StepOut(job_id=job.id, step_id=step.step_id, name=step.name, state=step.state, nodes=list(step.nodes),
                   tasks_per_node=list(step.tasks_per_node), num_tasks=step.num_tasks, start_time=step.start_time,
                   end_time=step.end_time, exit_code=step.exit_code, exit_signal=step.signal, error=step.error,
                   reported_nodes=sorted(step.reported))


def step_rows(job: Job, live: LiveOfJob | None = None) -> list[dict]:
    """The steps as JobOut.steps carries them (sacct's N.0, N.1 ... rows), with what their tasks used."""
    live = live or {}
    return [{"step_id": str(st.step_id), "name": st.name, "nodelist": hostlist.compress(st.nodes),
             "num_tasks": st.num_tasks, "start_time": st.start_time, "end_time": st.end_time, "state": st.state,
             "exit_code": st.exit_code, "exit_signal": st.signal,
             "usage": step_usage(job, st.step_id, live.get(st.step_id))} for st in job.steps]


def share_launch(job: Job, held: NodeSlice, node: Node | None) -> GpuShareLaunch | None:
    """What bounds a job's tasks on a share of one device: the share, the device's memory, its shards."""
    if held.gpu_milli >= 1000 or not held.gpus:
        return None
    memory = next((g.memory_mib for g in node.gpus if g.index == held.gpus[0]), 0) if node else 0
    kind, _, amount = job.spec.gpu_share.partition(":")
    return GpuShareLaunch(gpu_milli=held.gpu_milli, device_memory_mib=memory,
                          shards=int(amount) if kind == "shard" else 0)


def step_container(job: Job, launch: dict) -> ContainerLaunch | None:
    """A step's container: its job's (sbatch's --container-* reach its steps, as pyxis's do), each option the
    step gave (srun's) replacing the job's."""
    job_fields = {name: getattr(job.spec, name) for name in container_options.FIELDS}
    return ContainerLaunch.of(job_fields | container_options.given(launch))


def step_launch_message(job: Job, step: Step, node_name: str, nodes: dict[str, Node],
                        cluster_name: str) -> LaunchStep:
    index = step.nodes.index(node_name)
    held = next(s for s in job.slices if s.node == node_name)
    launch = step.launch
    per_task = launch.get("gpus_per_task")
    first_rank = sum(step.tasks_per_node[:index])
    tasks = []
    for local in range(step.tasks_per_node[index]):
        devices = list(held.gpus[local * per_task:(local + 1) * per_task]) if per_task else list(held.gpus)
        tasks.append(TaskLaunch(rank=first_rank + local, local_rank=local, gpus=devices))
    first = nodes.get(step.nodes[0])
    return LaunchStep(
        job_id=job.id, step_id=step.step_id, step_name=step.name, job_name=job.spec.name, user=job.spec.user,
        uid=job.spec.uid, partition=job.spec.request.partition, cluster_name=cluster_name,
        submit_host=job.spec.submit_host, job_nodes=list(job.node_names), cpus_on_node=held.cpus,
        mem_per_node_mib=job.spec.request.mem_per_node_mib,
        node_gpus=list(held.gpus), time_limit_s=job.spec.request.time_limit_s, restart_count=job.restart_count,
        step_nodes=list(step.nodes), node_index=index, tasks_per_node=list(step.tasks_per_node),
        num_tasks=step.num_tasks, cpus_per_task=launch.get("cpus_per_task", 1), gpus_per_task=per_task,
        share=share_launch(job, held, nodes.get(node_name)),
        tasks=tasks, argv=list(launch["argv"]), workdir=launch["workdir"], env=dict(launch.get("env") or {}),
        master_addr=first.address if first else "127.0.0.1", master_port=20000 + (job.id * 7 + step.step_id) % 40000,
        output=launch.get("output"), error=launch.get("error"), input=launch.get("input", "all"),
        io_host=launch.get("io_host"), io_port=launch.get("io_port"), io_token=launch.get("io_token", ""),
        pty=launch.get("pty", False), pty_rows=launch.get("pty_rows", 24), pty_cols=launch.get("pty_cols", 80),
        acctg_freq_s=job.spec.acctg_freq_s,
        container=step_container(job, launch),
    )
