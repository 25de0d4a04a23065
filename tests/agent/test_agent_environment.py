from __future__ import annotations

import pytest

from corral.agent.environment import expand_pattern, scrub_environment, slurm_counts, task_environment
from corral.protocol import GpuShareLaunch, TaskLaunch

BASE_ENV = {
    "PATH": "/usr/bin",
    "HOME": "/home/alice",
    "SLURM_JOB_ID": "999",
    "SLURM_CPUS_PER_TASK": "16",
    "SLURMD_NODENAME": "old",
    "SRUN_DEBUG": "3",
    "SBATCH_PARTITION": "old",
    "RANK": "5",
    "MASTER_ADDR": "elsewhere",
    "CUDA_VISIBLE_DEVICES": "7",
}


TWO_BY_TWO = dict(
    job_id=4242,
    job_name="train",
    user="alice",
    uid=1000,
    partition="gpu",
    node_index=1,
    nodes=["gpu01", "gpu02"],
    master_addr="gpu01",
    master_port=29512,
    tasks_per_node=2,
    num_tasks=4,
    cpus_per_task=4,
    cpus_on_node=8,
    mem_per_node_mib=16384,
    node_gpus=[2, 3],
    gpus_per_task=1,
    tasks=[TaskLaunch(rank=2, local_rank=0, gpus=[2]), TaskLaunch(rank=3, local_rank=1, gpus=[3])],
    restart_count=1,
    submit_host="login1",
    cluster_name="corral",
    env={"FOO": "bar", "SLURM_ARRAY_TASK_ID": "3", "SLURM_NTASKS": "99", "CUDA_VISIBLE_DEVICES": "5"},
    workdir="/work/exp",
)


@pytest.fixture
def two_by_two_job(make_launch):
    """Node 2 of a 2-node x 2-task job, 2 GPUs per node, one per task."""

    def make(**overrides):
        return make_launch(**{**TWO_BY_TWO, **overrides})

    return make


def test_two_node_two_task_job_sets_every_variable(two_by_two_job):
    launch = two_by_two_job()
    env = task_environment(launch, launch.tasks[1], "gpu02", BASE_ENV)
    expected = {
        "PATH": "/usr/bin",
        "HOME": "/home/alice",
        "FOO": "bar",
        "SLURM_ARRAY_TASK_ID": "3",  # the user's (controller's) variables pass through
        "CUDA_VISIBLE_DEVICES": "3",
        "GPU_DEVICE_ORDINAL": "3",
        "SLURM_JOB_ID": "4242",
        "SLURM_JOBID": "4242",
        "CORRAL_JOB_ID": "4242",
        "SLURM_JOB_NAME": "train",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_UID": "1000",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURM_CLUSTER_NAME": "corral",
        "SLURM_SUBMIT_DIR": "/work/exp",
        "SLURM_SUBMIT_HOST": "login1",
        "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1",
        "SLURM_NODEID": "1",
        "SLURM_NTASKS": "4",
        "SLURM_NPROCS": "4",
        "SLURM_NTASKS_PER_NODE": "2",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
        "SLURM_JOB_NODELIST": "gpu[01-02]",
        "SLURM_NODELIST": "gpu[01-02]",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURMD_NODENAME": "gpu02",
        "SLURM_CPUS_ON_NODE": "8",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_GPUS_ON_NODE": "2",
        "SLURM_JOB_GPUS": "2,3",
        "SLURM_STEP_GPUS": "2,3",
        "SLURM_GPUS_PER_TASK": "1",
        "SLURM_RESTART_COUNT": "1",
        "SLURM_MEM_PER_NODE": "16384",
        "MASTER_ADDR": "gpu01",
        "MASTER_PORT": "29512",
        "WORLD_SIZE": "4",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    assert env == expected  # exactly: nothing stale from the agent's environment, the job's values win


def test_tasks_see_their_own_devices_and_ranks(two_by_two_job):
    launch = two_by_two_job()
    first, second = (task_environment(launch, t, "gpu02", {}) for t in launch.tasks)
    assert (first["CUDA_VISIBLE_DEVICES"], second["CUDA_VISIBLE_DEVICES"]) == ("2", "3")
    assert (first["SLURM_PROCID"], second["SLURM_PROCID"]) == ("2", "3")
    assert (first["LOCAL_RANK"], second["LOCAL_RANK"]) == ("0", "1")


def test_optional_variables_are_absent_when_not_requested(two_by_two_job):
    launch = two_by_two_job(
        cpus_per_task=1,
        restart_count=0,
        mem_per_node_mib=0,
        gpus_per_task=None,
        node_gpus=[],
        tasks=[TaskLaunch(rank=2, local_rank=0, gpus=[]), TaskLaunch(rank=3, local_rank=1, gpus=[])],
    )
    env = task_environment(launch, launch.tasks[0], "gpu02", BASE_ENV)
    for absent in (
        "CUDA_VISIBLE_DEVICES",  # even though the agent's and the user's environment had one
        "GPU_DEVICE_ORDINAL",
        "SLURM_CPUS_PER_TASK",  # even though the agent's environment had one
        "SLURM_RESTART_COUNT",
        "SLURM_MEM_PER_NODE",
        "SLURM_GPUS_PER_TASK",
        "SLURM_JOB_GPUS",
        "SLURM_STEP_GPUS",
        "SRUN_DEBUG",
        "SBATCH_PARTITION",
    ):
        assert absent not in env, absent
    assert env["SLURM_GPUS_ON_NODE"] == "0"


def test_single_node_counts_have_no_repeat_suffix(make_launch):
    launch = make_launch(nodes=["n5"], tasks_per_node=2, num_tasks=2, cpus_on_node=6)
    env = task_environment(launch, launch.tasks[0], "n5", {})
    assert env["SLURM_TASKS_PER_NODE"] == "2"
    assert env["SLURM_JOB_CPUS_PER_NODE"] == "6"
    assert env["SLURM_JOB_NODELIST"] == "n5"


def test_user_variables_override_the_agents_but_not_the_jobs(make_launch):
    launch = make_launch(env={"HOME": "/mine", "WORLD_SIZE": "99"})
    env = task_environment(launch, launch.tasks[0], "n1", {"HOME": "/agent", "LANG": "C"})
    assert (env["HOME"], env["LANG"], env["WORLD_SIZE"]) == ("/mine", "C", "1")


def test_scrub_environment():
    assert scrub_environment(BASE_ENV) == {"PATH": "/usr/bin", "HOME": "/home/alice"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [([2, 2], "2(x2)"), ([4], "4"), ([2, 2, 1], "2(x2),1"), ([1, 2, 2, 2], "1,2(x3)"), ([], "")],
)
def test_slurm_counts(values, expected):
    assert slurm_counts(values) == expected


CONTEXT = dict(job_id=4242, job_name="train", user="alice", node_name="gpu02", node_index=1, task_rank=3)


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("slurm-%j.out", "slurm-4242.out"),
        ("%J", "4242.batch"),
        ("%x-%u-%N-%n-%t", "train-alice-gpu02-1-3"),
        ("%A_%a", "4242_4294967294"),
        ("step-%s", "step-batch"),
        ("/f/%j/%j_%t_log.out", "/f/4242/4242_3_log.out"),
        ("%5j", "04242"),
        ("%3t.%2n", "003.01"),
        ("%12j", "0000004242"),  # widths are capped at 10, as in Slurm
        ("%5x", "train"),  # widths do not apply to text
        ("100%%", "100%"),
        ("%%j", "%j"),
        ("%q%Z", "%q%Z"),  # unknown letters stay
        ("50%", "50%"),
        ("a\\%j", "a%j"),  # a backslash turns expansion off
        ("plain.log", "plain.log"),
    ],
)
def test_expand_pattern(pattern, expected):
    assert expand_pattern(pattern, **CONTEXT) == expected


def test_expand_pattern_for_an_array_task():
    assert expand_pattern("%A_%a-%j", **CONTEXT, array_job_id=40, array_task_id=2) == "40_2-4242"


def test_a_task_on_a_share_gets_the_mps_variables_that_bound_it(make_launch):
    # --gres=shard:2 of 8 on device 3 of 80 GiB: 25 % of its SMs and 20 GiB, named as the task sees
    # the device (ordinal 0 of its one visible device); the agent's own MPS settings never leak in.
    share = GpuShareLaunch(gpu_milli=250, device_memory_mib=81920, shards=2)
    launch = make_launch(node_gpus=[3], share=share, tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[3])])
    agent = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G"}
    env = task_environment(launch, launch.tasks[0], "n1", agent)
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert env["SLURM_SHARDS_ON_NODE"] == "2"


def test_mps_shares_round_down_and_whole_devices_get_no_mps_variables(make_launch):
    # mps:33 of a device of unknown memory: no memory limit can be stated; no shard count either.
    share = GpuShareLaunch(gpu_milli=335, device_memory_mib=0, shards=0)
    launch = make_launch(node_gpus=[0], share=share, tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[0])])
    env = task_environment(launch, launch.tasks[0], "n1", {})
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "33"
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env and "SLURM_SHARDS_ON_NODE" not in env
    whole = make_launch(node_gpus=[0], tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[0])])
    agent = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"}
    env = task_environment(whole, whole.tasks[0], "n1", agent)
    assert not any(k.startswith("CUDA_MPS_") or k == "SLURM_SHARDS_ON_NODE" for k in env)


def test_the_agents_connection_variables_win_over_the_submitters(make_launch):
    # A login host's URL (its loopback, say) need not work from the node: the agent's does.
    launch = make_launch(env={"CORRAL_URL": "http://127.0.0.1:6817", "CORRAL_CA_FILE": "/login/ca.pem",
                              "KEEP": "1"})
    agent = {"CORRAL_URL": "https://head:6817", "CORRAL_CA_FILE": "/etc/corral/ca.pem"}
    env = task_environment(launch, launch.tasks[0], "n1", agent)
    assert (env["CORRAL_URL"], env["CORRAL_CA_FILE"], env["KEEP"]) == ("https://head:6817", "/etc/corral/ca.pem", "1")


def test_a_job_without_a_path_gets_logins_with_corrals_commands_first(make_launch):
    launch = make_launch(env={})
    env = task_environment(launch, launch.tasks[0], "n1", {"CORRAL_SLURM_BIN": "/spool/bin"})
    assert env["PATH"] == "/spool/bin:/usr/local/bin:/usr/bin:/bin"
    assert task_environment(launch, launch.tasks[0], "n1", {})["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_the_agent_gives_tasks_only_corrals_variables(tmp_path, monkeypatch):
    from corral.agent.__main__ import task_variables

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-only")
    given = task_variables(("http://head:6817",), tmp_path / "spool", "/etc/corral/ca.pem")
    assert set(given) == {"CORRAL_URL", "CORRAL_SLURM_BIN", "CORRAL_CA_FILE"}
    assert given["CORRAL_URL"] == "http://head:6817"
