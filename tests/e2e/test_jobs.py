"""End to end: a real controller and agents on this machine run gang jobs with exactly their GPUs."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.e2e.harness import API, wait_for

pytestmark = pytest.mark.slow

ENV_DUMP = """#!/bin/sh
env > "{out}/task-$SLURM_PROCID.env"
"""


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_two_node_gang_gets_distinct_devices_and_consistent_environment(cluster, tmp_path) -> None:
    out = tmp_path / "envs"
    out.mkdir()
    job_id = cluster.submit(script=ENV_DUMP.format(out=out), name="envdump", nodes=2, ntasks_per_node=2,
                            gpus_per_task=1)
    job = cluster.wait_state(job_id, "COMPLETED")
    assert job["nodelist"] == "node[1-2]" and job["total_gpus"] == 4
    envs = {int(p.stem.split("-")[1]): read_env(p) for p in out.glob("task-*.env")}
    assert sorted(envs) == [0, 1, 2, 3]
    devices = set()
    for rank, env in envs.items():
        node_index, local = divmod(rank, 2)
        assert env["SLURM_PROCID"] == env["RANK"] == str(rank)
        assert env["SLURM_LOCALID"] == env["LOCAL_RANK"] == str(local)
        assert env["SLURM_NODEID"] == str(node_index)
        assert env["SLURMD_NODENAME"] == f"node{node_index + 1}"
        assert env["SLURM_NTASKS"] == env["WORLD_SIZE"] == "4"
        assert env["SLURM_NTASKS_PER_NODE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["SLURM_JOB_NODELIST"] == env["SLURM_NODELIST"] == "node[1-2]"
        assert env["SLURM_NNODES"] == env["SLURM_JOB_NUM_NODES"] == "2"
        assert env["SLURM_JOB_ID"] == str(job_id) and env["SLURM_JOB_NAME"] == "envdump"
        assert env["MASTER_ADDR"] == envs[0]["MASTER_ADDR"] and env["MASTER_PORT"] == envs[0]["MASTER_PORT"]
        gpus = env["CUDA_VISIBLE_DEVICES"].split(",")
        assert len(gpus) == 1
        devices.add((env["SLURMD_NODENAME"], gpus[0]))
    assert len(devices) == 4, "every task has its own device"
    slices = {s["node"]: s["gpus"] for s in job["slices"]}
    assert devices == {(n, str(g)) for n, gs in slices.items() for g in gs}, "exactly the allocated devices"
    assert job["gpu_seconds"] >= 0 and job["exit_code"] == 0


def test_contending_gangs_one_runs_whole_the_other_holds_nothing(cluster_factory, tmp_path) -> None:
    cluster = cluster_factory(nodes=8, gpus=1)
    ids: list[int] = []
    barrier = threading.Barrier(2)

    def submit() -> None:
        barrier.wait()
        ids.append(cluster.submit(argv=["sleep", "4"], gpus=5, ntasks=5, gpus_per_task=1))

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: any(cluster.job(i)["state"] == "RUNNING" for i in ids), message="one gang running")
    # The other gang, submitted a few ms later, may still be within its start delay when the first starts:
    # its reason is given by the next cycle, which may come up to min_cycle_interval_s later.
    wait_for(lambda: [cluster.job(i)["reason"] for i in ids if cluster.job(i)["state"] == "PENDING"] == ["Resources"],
             message="the other gang waiting on Resources")
    jobs = {i: cluster.job(i) for i in ids}
    states = sorted(j["state"] for j in jobs.values())
    assert states == ["PENDING", "RUNNING"]
    runner = next(j for j in jobs.values() if j["state"] == "RUNNING")
    waiter = next(j for j in jobs.values() if j["state"] == "PENDING")
    assert len(runner["slices"]) == 5 and waiter["slices"] == []
    assert waiter["reason"] == "Resources" and waiter["estimated_start"] is not None
    allocated = sum(n["gpus_alloc"] for n in cluster.nodes())
    assert allocated == 5, "no GPU is held by the waiting gang"
    cluster.wait_state(runner["id"], "COMPLETED")
    cluster.wait_state(waiter["id"], "COMPLETED", timeout_s=40)


def test_cancel_running_job_stops_its_processes(cluster, tmp_path) -> None:
    pidfile = tmp_path / "pid"
    job_id = cluster.submit(script=f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 300\n", gpus=1)
    cluster.wait_state(job_id, "RUNNING")
    wait_for(pidfile.exists, message="task wrote its pid")
    pid = int(pidfile.read_text())
    reply = cluster.http.post(f"{API}/jobs/{job_id}/cancel")
    assert reply.status_code == 200
    job = cluster.wait_state(job_id, "CANCELLED")
    assert job["end_time"] is not None
    wait_for(lambda: not _alive(pid), message="task process gone")
    assert cluster.http.post(f"{API}/jobs/{job_id}/cancel").status_code == 409


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it has exited all the same.
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_time_limit_expires(cluster) -> None:
    job_id = cluster.submit(argv=["sleep", "120"], gpus=1, time_limit_s=2)
    job = cluster.wait_state(job_id, "TIMEOUT", timeout_s=20)
    assert 2 <= job["elapsed_s"] < 12
    assert job["exit_signal"] in (15, 9)


def test_short_job_backfills_without_delaying_the_blocked_gang(cluster) -> None:
    blocker = cluster.submit(argv=["sleep", "6"], gpus_per_node=4, time_limit_s=8)
    cluster.wait_state(blocker, "RUNNING")
    gang = cluster.submit(argv=["true"], nodes=2, gpus_per_node=4, time_limit_s=60)
    gang_job = wait_for(lambda: (j := cluster.job(gang))["estimated_start"] and j, message="reservation")
    promised = gang_job["estimated_start"]
    long_job = cluster.submit(argv=["sleep", "1"], gpus_per_node=4, time_limit_s=600)
    short = cluster.submit(argv=["sleep", "1"], gpus_per_node=4, time_limit_s=3)
    short_job = cluster.wait_state(short, "RUNNING", "COMPLETED")
    assert short_job["start_time"] < promised
    waiting = cluster.job(long_job)
    assert waiting["state"] == "PENDING", "a job that would delay the reservation waits"
    # It holds a reservation of its own, behind the gang's.
    assert waiting["reason"] == "Resources" and waiting["estimated_start"] >= promised + 60
    started = cluster.wait_state(gang, "RUNNING", "COMPLETED", timeout_s=30)
    assert started["start_time"] <= promised + 1.0, "the reservation was not delayed"


def test_bad_submissions_are_refused_with_specific_messages(cluster) -> None:
    cases = {
        "partition": ({"partition": "nope"}, "invalid partition"),
        "too many gpus": ({"gpus_per_node": 9}, "requested node configuration is not available"),
        "two commands": ({"script": "#!/bin/sh\n"}, "exactly one"),
        # Relative to what? The controller (maybe on another host) cannot know; the client resolves it.
        "relative workdir": ({"workdir": "exp/run1"}, "workdir: the working directory must be an absolute path"),
        "empty workdir": ({"workdir": ""}, "workdir: String should have at least 1 character"),
    }
    for name, (fields, message) in cases.items():
        body = {"workdir": "/tmp", "user": "t", "argv": ["true"], **fields}
        reply = cluster.http.post(f"{API}/jobs", json=body)
        assert reply.status_code == 422, name
        assert message in reply.json()["detail"], name
    assert cluster.http.get(f"{API}/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401


def test_controller_sigkill_and_restart_loses_nothing(cluster, tmp_path) -> None:
    marker = tmp_path / "done"
    running = cluster.submit(script=f"#!/bin/sh\nsleep 5\necho ok > {marker}\n", nodes=2, gpus_per_node=4)
    cluster.wait_state(running, "RUNNING")
    queued = [cluster.submit(argv=["true"], gpus=1) for _ in range(3)]
    cluster.kill_controller()
    cluster.start_controller()
    assert cluster.job(running)["state"] == "RUNNING"
    assert all(cluster.job(q)["state"] == "PENDING" for q in queued)
    job = cluster.wait_state(running, "COMPLETED", timeout_s=40)
    assert marker.read_text().strip() == "ok", "the job kept running through the restart"
    assert job["exit_code"] == 0
    for q in queued:
        cluster.wait_state(q, "COMPLETED", timeout_s=30)
    acct = cluster.http.get(f"{API}/accounting").json()
    assert {running, *queued} <= {j["id"] for j in acct}


def test_script_arguments_and_openapi(cluster, tmp_path) -> None:
    out = tmp_path / "args"
    job_id = cluster.submit(script=f'#!/bin/sh\necho "$@" > {out}\n', script_args=["--epochs", "3"])
    cluster.wait_state(job_id, "COMPLETED")
    assert out.read_text().strip() == "--epochs 3"
    schema = cluster.http.get("/openapi.json").json()
    assert {"/api/v1/jobs", "/api/v1/nodes", "/api/v1/accounting"} <= set(schema["paths"])


def test_batch_job_runs_its_script_once_with_the_batch_environment(cluster, tmp_path) -> None:
    out = tmp_path / "batch"
    out.mkdir()
    script = f'#!/bin/sh\nenv > "{out}/$SLURMD_NODENAME-$$.env"\n'
    plain = cluster.submit(script=script, batch=True, nodes=2, gpus_per_node=2)
    cluster.wait_state(plain, "COMPLETED")
    (dump,) = list(out.glob("*.env"))
    env = read_env(dump)
    assert dump.name.startswith("node1-"), "the batch script runs on the first node only"
    assert env["ENVIRONMENT"] == "BATCH" and env["SLURM_PROCID"] == "0" and env["SLURM_NODEID"] == "0"
    assert env["SLURM_JOB_NODELIST"] == "node[1-2]" and env["SLURM_JOB_NUM_NODES"] == "2"
    assert len(env["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    for absent in ("SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK", "RANK", "WORLD_SIZE"):
        assert absent not in env, absent
    dump.unlink()
    counted = cluster.submit(script=script, batch=True, nodes=2, ntasks_per_node=2, cpus_per_task=2)
    cluster.wait_state(counted, "COMPLETED")
    (dump,) = list(out.glob("*.env"))
    env = read_env(dump)
    assert (env["SLURM_NTASKS"], env["SLURM_NTASKS_PER_NODE"], env["SLURM_CPUS_PER_TASK"]) == ("4", "2", "2")


def test_a_job_can_requeue_itself_through_the_controller(cluster, tmp_path) -> None:
    log = tmp_path / "runs"
    scontrol = str(Path(__import__("sys").executable).parent / "scontrol")
    script = (f"#!/bin/sh\necho run $SLURM_RESTART_COUNT >> {log}\n"
              f"if [ -z \"$SLURM_RESTART_COUNT\" ]; then {scontrol} requeue $SLURM_JOB_ID; sleep 30; fi\n")
    job_id = cluster.submit(script=script, batch=True, gpus=1)
    job = cluster.wait_state(job_id, "COMPLETED", timeout_s=40)
    assert log.read_text().split("\n")[:2] == ["run", "run 1"]
    assert job["restart_count"] == 1
