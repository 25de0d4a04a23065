"""The environment a task runs in, and where its output goes (corral.filename_pattern expands the
names). Pure functions, no I/O.

Variable names, values and *presence* follow Slurm 22.05 (see slurm-compat.md section 4): Lightning and
submitit decide what they are running under from which variables exist, not only from their values.

A task's environment is built, as slurmd builds it, from the job's own environment (what sbatch or srun
submitted, as --export said) and corral's variables: the job's, the step's and the task's, and what the
agent deliberately gives every task (`agent_env`: the controller's URL and CA as this node reaches them,
the directory of corral's Slurm commands). The agent's own process environment contributes nothing.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from corral import hostlist
from corral.agent.tasks import int_or_none
from corral.filename_pattern import expand_pattern
from corral.protocol import LaunchJob, LaunchStep, TaskLaunch
from corral.slurm.common.commands_dir import first_on_path

# Nothing Slurm-ish that the agent gives must reach tasks: a stale SLURM_CPUS_PER_TASK would change what srun
# and Lightning do.
SCRUBBED_PREFIXES = ("SLURM_", "SLURMD_", "SRUN_", "SBATCH_")
TORCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
# Device selection belongs to the allocation; never inherit it.
GPU_VARIABLES = ("CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                 "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
# How a task reaches the controller from this node: the agent's word wins over what the submitter had (a
# login host's URL, e.g. its loopback, need not work from here).
CONNECTION_VARIABLES = ("CORRAL_URL", "CORRAL_CA_FILE")
# A task whose job submitted no PATH (--export=NONE) finds programs where login(1) would have it look.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def scrub_environment(env: Mapping[str, str]) -> dict[str, str]:
    """`env` without Slurm, torch rendezvous and GPU selection variables."""
    dropped = set(TORCH_VARIABLES) | set(GPU_VARIABLES)
    return {k: v for k, v in env.items() if not k.startswith(SCRUBBED_PREFIXES) and k not in dropped}


def submitted_environment(launch: LaunchJob | LaunchStep, agent_env: Mapping[str, str]) -> dict[str, str]:
    """What the agent gives (scrubbed), then the job's submitted variables, then the controller's
    connection variables as the agent has them."""
    env = scrub_environment(agent_env)
    env.update(launch.env)
    env.update({name: agent_env[name] for name in CONNECTION_VARIABLES if name in agent_env})
    return env


def task_environment(
    launch: LaunchJob, task: TaskLaunch, node_name: str, agent_env: Mapping[str, str]
) -> dict[str, str]:
    """The full environment of one task: what the agent gives, then the user's, then the job's.

    The user's submitted variables pass as they are (the controller may carry job facts the launch
    message has no field for, such as SLURM_ARRAY_TASK_ID, through them); the job's variables override
    them, and device selection is never inherited.
    """
    env = submitted_environment(launch, agent_env)
    if launch.batch:
        env.update(batch_variables(launch, node_name))
    else:
        env.update(job_variables(launch, node_name))
        env.update(rank_variables(task))
    for name in GPU_VARIABLES:
        env.pop(name, None)  # a task without GPUs must not see the user's or agent's device list
    env.update(gpu_variables(task))
    env.update(share_variables(launch, task))
    return with_slurm_commands(env, agent_env)


def with_slurm_commands(env: dict[str, str], agent_env: Mapping[str, str]) -> dict[str, str]:
    """Put the agent's directory of corral's Slurm commands (CORRAL_SLURM_BIN) first on PATH: a job's
    `srun` or `scontrol` must be corral's even on a host where real Slurm is installed."""
    env.setdefault("PATH", DEFAULT_PATH)
    directory = agent_env.get("CORRAL_SLURM_BIN")
    if directory:
        env["PATH"] = first_on_path(directory, env["PATH"])
    return env


def job_identity(launch: LaunchJob | LaunchStep) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": str(launch.job_id),
        "SLURM_JOBID": str(launch.job_id),
        "CORRAL_JOB_ID": str(launch.job_id),
        "SLURM_JOB_NAME": launch.job_name,
        "SLURM_JOB_USER": launch.user,
        "SLURM_JOB_UID": str(launch.uid),
        "SLURM_JOB_PARTITION": launch.partition,
        "SLURM_CLUSTER_NAME": launch.cluster_name,
    }


def job_variables(launch: LaunchJob, node_name: str) -> dict[str, str]:
    """Variables with the same value for every task of the job on this node."""
    num_nodes = len(launch.nodes)
    nodelist = hostlist.compress(launch.nodes)
    env = {
        **job_identity(launch),
        "SLURM_SUBMIT_DIR": launch.workdir,
        "SLURM_SUBMIT_HOST": launch.submit_host,
        "SLURM_NODEID": str(launch.node_index),
        "SLURM_NTASKS": str(launch.num_tasks),
        "SLURM_NPROCS": str(launch.num_tasks),
        "SLURM_NTASKS_PER_NODE": str(launch.tasks_per_node),
        "SLURM_TASKS_PER_NODE": slurm_counts([launch.tasks_per_node] * num_nodes),
        "SLURM_JOB_CPUS_PER_NODE": slurm_counts([launch.cpus_on_node] * num_nodes),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_NNODES": str(num_nodes),
        "SLURM_JOB_NUM_NODES": str(num_nodes),
        "SLURMD_NODENAME": node_name,
        "SLURM_CPUS_ON_NODE": str(launch.cpus_on_node),
        "SLURM_GPUS_ON_NODE": str(len(launch.node_gpus)),
        "MASTER_ADDR": launch.master_addr,
        "MASTER_PORT": str(launch.master_port),
        "WORLD_SIZE": str(launch.num_tasks),
        "LOCAL_WORLD_SIZE": str(launch.tasks_per_node),
    }
    env.update(optional_job_variables(launch))
    return env


# Set in a step's tasks but not in sbatch's batch shell (slurm-compat.md section 4).
_STEP_ONLY = ("SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
              "LOCAL_WORLD_SIZE", "SLURM_CPUS_PER_TASK", "SLURM_STEP_GPUS")


def batch_variables(launch: LaunchJob, node_name: str) -> dict[str, str]:
    """The batch shell's variables: the job's, with ranks fixed at 0 and task counts only when the
    user gave them (-n, --ntasks-per-node, -c), as Slurm's env_array_for_batch_job."""
    env = {k: v for k, v in job_variables(launch, node_name).items() if k not in _STEP_ONLY}
    env.update({"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_GTIDS": "0",
                "ENVIRONMENT": "BATCH"})
    if "ntasks" in launch.explicit or "ntasks_per_node" in launch.explicit:
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(launch.num_tasks)
    if "ntasks_per_node" in launch.explicit:
        env["SLURM_NTASKS_PER_NODE"] = str(launch.tasks_per_node)
    if "cpus_per_task" in launch.explicit:
        env["SLURM_CPUS_PER_TASK"] = str(launch.cpus_per_task)
    return env


def optional_job_variables(launch: LaunchJob) -> dict[str, str]:
    """Variables Slurm sets only when the user asked for the thing (presence matters to clients)."""
    env: dict[str, str] = {}
    # Slurm exports SLURM_CPUS_PER_TASK only with -c.
    if "cpus_per_task" in launch.explicit or (not launch.explicit and launch.cpus_per_task > 1):
        env["SLURM_CPUS_PER_TASK"] = str(launch.cpus_per_task)
    if launch.gpus_per_task is not None:
        env["SLURM_GPUS_PER_TASK"] = str(launch.gpus_per_task)
    if "gpus_per_node" in launch.explicit:  # --gpus-per-node: every node of the job holds as many
        env["SLURM_GPUS_PER_NODE"] = str(len(launch.node_gpus))
    if launch.restart_count > 0:
        env["SLURM_RESTART_COUNT"] = str(launch.restart_count)
    if launch.mem_per_node_mib > 0:
        env["SLURM_MEM_PER_NODE"] = str(launch.mem_per_node_mib)
    if launch.node_gpus:
        node_gpus = ",".join(str(g) for g in launch.node_gpus)
        env["SLURM_JOB_GPUS"] = node_gpus
        env["SLURM_STEP_GPUS"] = node_gpus
    return env


def step_environment(
    launch: LaunchStep, task: TaskLaunch, node_name: str, agent_env: Mapping[str, str]
) -> dict[str, str]:
    """The full environment of one task of a job step (srun): what the agent gives, then what srun
    exported (`launch.env`), then the job's, the step's and the task's variables (env_array_for_step).

    Presence is srun's to decide for SLURM_NTASKS_PER_NODE, SLURM_CPUS_PER_TASK and SLURM_GPUS_PER_TASK:
    they reach the task only through `launch.env` (given to srun, or inherited from the batch shell).
    """
    env = submitted_environment(launch, agent_env)
    env.update(step_variables(launch, node_name))
    env.update(rank_variables(task))
    for name in (*GPU_VARIABLES, "SLURM_STEP_GPUS"):
        env.pop(name, None)  # the batch shell's devices are not this task's
    env.update(gpu_variables(task))
    env.update(share_variables(launch, task))
    if task.gpus:
        env["SLURM_STEP_GPUS"] = ",".join(str(g) for g in task.gpus)
    return with_slurm_commands(env, agent_env)


def step_variables(launch: LaunchStep, node_name: str) -> dict[str, str]:
    """Variables with the same value for every task of the step on this node."""
    job_nodes = hostlist.compress(launch.job_nodes)
    step_nodes = hostlist.compress(launch.step_nodes)
    tasks_per_node = slurm_counts(launch.tasks_per_node)
    env = {
        # The job's.
        **job_identity(launch),
        "SLURM_JOB_NODELIST": job_nodes,
        "SLURM_JOB_NUM_NODES": str(len(launch.job_nodes)),
        "SLURM_JOB_CPUS_PER_NODE": slurm_counts([launch.cpus_on_node] * len(launch.job_nodes)),
        "SLURM_CPUS_ON_NODE": str(launch.cpus_on_node),
        "SLURM_GPUS_ON_NODE": str(len(launch.node_gpus)),
        "SLURMD_NODENAME": node_name,
        "SLURM_SUBMIT_HOST": launch.submit_host,
        # The step's.
        "SLURM_STEP_ID": str(launch.step_id),
        "SLURM_STEPID": str(launch.step_id),
        "SLURM_STEP_NODELIST": step_nodes,
        "SLURM_STEP_NUM_NODES": str(len(launch.step_nodes)),
        "SLURM_STEP_NUM_TASKS": str(launch.num_tasks),
        "SLURM_STEP_TASKS_PER_NODE": tasks_per_node,
        "SLURM_NTASKS": str(launch.num_tasks),
        "SLURM_NPROCS": str(launch.num_tasks),
        "SLURM_NNODES": str(len(launch.step_nodes)),
        "SLURM_NODELIST": step_nodes,
        "SLURM_TASKS_PER_NODE": tasks_per_node,
        "SLURM_NODEID": str(launch.node_index),
        "SLURM_GTIDS": ",".join(str(t.rank) for t in launch.tasks),
        "MASTER_ADDR": launch.master_addr,
        "MASTER_PORT": str(launch.master_port),
        "WORLD_SIZE": str(launch.num_tasks),
        "LOCAL_WORLD_SIZE": str(len(launch.tasks)),
    }
    if launch.node_gpus:
        env["SLURM_JOB_GPUS"] = ",".join(str(g) for g in launch.node_gpus)
    if launch.io_host is not None and launch.io_port is not None:
        env["SLURM_SRUN_COMM_HOST"] = launch.io_host
        env["SLURM_LAUNCH_NODE_IPADDR"] = launch.io_host
        env["SLURM_SRUN_COMM_PORT"] = str(launch.io_port)
        env["SLURM_STEP_LAUNCHER_PORT"] = str(launch.io_port)
    if launch.restart_count > 0:
        env["SLURM_RESTART_COUNT"] = str(launch.restart_count)
    return env


def rank_variables(task: TaskLaunch) -> dict[str, str]:
    return {
        "SLURM_PROCID": str(task.rank),
        "SLURM_LOCALID": str(task.local_rank),
        "RANK": str(task.rank),
        "LOCAL_RANK": str(task.local_rank),
    }


def gpu_variables(task: TaskLaunch) -> dict[str, str]:
    """Device selection for one task; empty without GPUs (an empty CUDA_VISIBLE_DEVICES hides all GPUs,
    an absent one shows all of them: neither is what a CPU task on a shared node should rely on, so the
    variable is left out, as Slurm does)."""
    if not task.gpus:
        return {}
    devices = ",".join(str(g) for g in task.gpus)
    return {"CUDA_VISIBLE_DEVICES": devices, "GPU_DEVICE_ORDINAL": devices}


def share_variables(launch: LaunchJob | LaunchStep, task: TaskLaunch) -> dict[str, str]:
    """What bounds a task on a share of one device under CUDA MPS: its share of the device's SMs (whole
    percent, rounded down so that shares never add up past the device) and of its memory. The memory
    limit names the device as the task's CUDA sees it: ordinal 0 of its one visible device. Shard jobs
    also get Slurm's SLURM_SHARDS_ON_NODE."""
    share = launch.share
    if share is None or not task.gpus:
        return {}
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, share.gpu_milli // 10))}
    if share.device_memory_mib:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={share.device_memory_mib * share.gpu_milli // 1000}M"
    if share.shards:
        env["SLURM_SHARDS_ON_NODE"] = str(share.shards)
    return env


def slurm_counts(values: list[int]) -> str:
    """Slurm's run-length form of per-node counts: [2, 2] -> "2(x2)", [4] -> "4", [2, 2, 1] -> "2(x2),1"."""
    parts: list[str] = []
    i = 0
    while i < len(values):
        run = 1
        while i + run < len(values) and values[i + run] == values[i]:
            run += 1
        parts.append(f"{values[i]}(x{run})" if run > 1 else str(values[i]))
        i += run
    return ",".join(parts)


def output_path(launch: LaunchJob | LaunchStep, pattern: str, node_name: str, task_rank: int) -> str:
    """Where a task's stdout or stderr goes: `pattern` expanded for this task, relative to the job's
    working directory (an absolute pattern stays as it is). Array jobs carry their ids in the env."""
    name = expand_pattern(
        pattern, job_id=launch.job_id, job_name=launch.job_name, user=launch.user, node_name=node_name,
        node_index=launch.node_index, task_rank=task_rank,
        array_job_id=int_or_none(launch.env.get("SLURM_ARRAY_JOB_ID")),
        array_task_id=int_or_none(launch.env.get("SLURM_ARRAY_TASK_ID")),
        step_id=getattr(launch, "step_id", None))
    return os.path.join(launch.workdir, name)
