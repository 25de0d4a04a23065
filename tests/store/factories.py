"""Records for store tests. `full_job` sets every field to a non-default value."""
from __future__ import annotations

from corral.core.model import Gpu, NodeSlice, Request
from corral.engine.history import Preempted
from corral.engine.records import Job, JobSpec, JobState, Node, NodeRun, Step

BASE_TIME = 1_700_000_000.123456789  # not a round float: it must survive storage exactly


def full_spec(job_id: int = 1, user: str = "alice", partition: str = "gpu") -> JobSpec:
    return JobSpec(
        name=f"train-{job_id}",
        user=user,
        request=Request(
            num_nodes=2,
            tasks_per_node=4,
            gpus_per_node=1,
            cpus_per_task=6,
            mem_per_node_mib=512_000,
            time_limit_s=7200,
            partition=partition,
            gpu_model="A100",
            gpu_milli=500,
        ),
        script="#!/bin/bash\nsrun python train.py --lr 3e-4 'quoted \"arg\"' ünïcødé\n",
        argv=("python", "train.py", "--epochs", "10"),
        workdir="/home/alice/project",
        env={"CUDA_LAUNCH_BLOCKING": "1", "PATH": "/usr/bin:/bin", "EMPTY": ""},
        output="logs/%x-%j.out",
        error="logs/%x-%j.err",
        gpus_per_task=2,
        priority=42,
        uid=1001,
        submit_host="login1",
        account="team-a",
        qos="high",
        queue="team-a-q",
        array_job_id=job_id,
        array_task_id=3,
        array_throttle=8,
        array_indices="0-9",
        dependency="afterok:1",
        warn_signal=10,
        warn_before_s=120,
        requeue=False,
        reservation="maint",
        batch=True,
        explicit="ntasks",
        comment="a comment",
        wckey="submitit",
        gpu_share="shard:4",
        open_mode="truncate",
        warn_batch=True,
        allocation=True,
        begin_time=1234.5,
        expedited_requeue=True,
        service="web",
        service_revision=3,
        replica=2,
        max_per_node=1,
        spread_replicas=3,
        nodelist="node[1-2]",
        exclude="node9",
        constraint="ib&h100",
        exclusive=True,
        session=True,
        acctg_freq_s=15,
        container_image="/images/pytorch.tar",
        container_mounts="/data:/data:ro",
        container_workdir="/work",
        container_name="env1",
        container_env="NCCL_DEBUG",
        container_mount_home=False,
        container_remap_root=True,
    )


def full_job(job_id: int = 1, user: str = "alice", partition: str = "gpu") -> Job:
    return Job(
        id=job_id,
        spec=full_spec(job_id, user, partition),
        submit_time=BASE_TIME + job_id,
        state=JobState.COMPLETING,
        reason="NodeDown",
        estimated_start=BASE_TIME + job_id + 0.5,
        start_time=BASE_TIME + job_id + 1.25,
        end_time=BASE_TIME + job_id + 3601.0 / 3.0,
        slices=(
            NodeSlice(node="gpu001", gpus=(0, 1, 2, 3, 4, 5, 6, 7), cpus=24, mem_mib=512_000),
            NodeSlice(node="gpu002", gpus=(0, 2, 4, 6, 1, 3, 5, 7), cpus=24, mem_mib=512_000),
        ),
        runs={
            "gpu001": NodeRun(started=True, finished=True, exit_code=3, signal=9, oom_killed=True,
                              usage={"samples": 4, "max_rss_kib": 1104, "cpu_s": 2.5, "max_gpu_util_pct": 73.0}),
            "gpu002": NodeRun(started=True, finished=False),
        },
        exit_code=137,
        exit_signal=9,
        final_state=JobState.OUT_OF_MEMORY,
        kill_deadline=BASE_TIME + job_id + 5000.0,
        drain_until=BASE_TIME + job_id + 4000.0,
        restart_count=2,
        held=True,
        prior_gpu_seconds=12.5,
        reason_detail="queue q: gpu over nominal",
        history=[Preempted(5.0, 9, "reclaim")],
        steps=[Step(step_id=0, name="python", nodes=("gpu001", "gpu002"), tasks_per_node=(2, 1), start_time=3.0,
                    launch={"argv": ["python", "-c", "pass"], "env": {"A": "1"}}, end_time=9.0, state="FAILED",
                    exit_code=3, signal=0, error="lost", reported={"gpu001": NodeRun(True, True, 3, 0)})],
        eligible_at=42.0,
        preemptions=2,
        warned=True,
        stop_cause="preempted",
        expedited=True,
        hold_nodes=("gpu002",),
        hold_until=BASE_TIME + job_id + 300.0,
        ready=True,
        endpoints={"gpu001": {"http": 41000 + job_id}},
    )


def pending_job(job_id: int, user: str = "bob", partition: str = "debug", submit_offset_s: float = 0.0) -> Job:
    """A just-submitted job: defaults everywhere (None times, no slices, no runs)."""
    spec = JobSpec(name=f"job-{job_id}", user=user, request=Request(partition=partition))
    return Job(id=job_id, spec=spec, submit_time=BASE_TIME + submit_offset_s)


def full_node(name: str = "gpu001") -> Node:
    return Node(
        name=name,
        gpus=tuple(Gpu(index=i, model="H100-SXM", memory_mib=81_559, domain=f"nvl{i // 4}") for i in range(8)),
        cpus=112,
        mem_mib=2_000_000,
        address="10.0.0.17",
        up=True,
        drain=True,
        drain_reason="bad ECC on GPU 3",
        last_seen=BASE_TIME + 0.001,
        partitions=frozenset({"gpu", "debug", "long"}),
        run_as_user=False,
        agent_user="corral",
        cgroups="no cgroup v2 (cgroup v1 at /sys/fs/cgroup)",
        features=frozenset({"ib", "a100"}),
    )
