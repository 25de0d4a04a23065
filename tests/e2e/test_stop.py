"""Stopping a cluster loses no job and leaves nothing running (issue 9): a real `corral up` stopped by
SIGTERM or killed outright, and an agent killed and restarted under a real controller. Each task carries a
marker in its environment, so the test finds every live process of its jobs (and the devices they see)
whatever the cluster says about them."""
from __future__ import annotations

import getpass
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from corral.store import Store
from tests.e2e.harness import API, free_port, wait_for

pytestmark = pytest.mark.slow

MARKER = "CORRAL_STOP_TEST"


def live_tasks(marker: str) -> list[dict[str, str]]:
    """The environment of every live (not zombie) process carrying `marker`."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get(MARKER) == marker:
            found.append(env)
    return found


def device_holders(marker: str) -> dict[tuple[str, str], set[str]]:
    """(node, GPU) -> the jobs whose live processes use it."""
    holders: dict[tuple[str, str], set[str]] = {}
    for env in live_tasks(marker):
        for gpu in filter(None, env.get("CUDA_VISIBLE_DEVICES", "").split(",")):
            holders.setdefault((env["SLURMD_NODENAME"], gpu), set()).add(env["SLURM_JOB_ID"])
    return holders


def assert_no_device_shared(marker: str) -> None:
    shared = {device: jobs for device, jobs in device_holders(marker).items() if len(jobs) > 1}
    assert not shared, f"devices used by several live jobs at once: {shared}"


def jobs_alive(marker: str) -> set[int]:
    return {int(env["SLURM_JOB_ID"]) for env in live_tasks(marker)}


class CorralUp:
    """`corral up` (2 nodes x 2 simulated GPUs) in a process of its own, as a user runs it."""

    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.state_dir = root / "state"
        self.config = root / "corral.toml"
        self.config.write_text("kill_grace_s = 2\n")
        self.proc: subprocess.Popen | None = None
        self.http: httpx.Client | None = None

    def start(self) -> CorralUp:
        env = {**os.environ, "XDG_CONFIG_HOME": str(self.root / "config"), "PYTHONUNBUFFERED": "1",
               "CORRAL_SYSTEM_CLUSTER_FILE": str(self.root / "etc" / "cluster.json")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "corral.cli.main", "up", "--nodes", "2", "--gpus-per-node", "2",
             "--port", str(self.port), "--state-dir", str(self.state_dir), "--config", str(self.config)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        banner = self.proc.stdout.readline()
        if "is up" not in banner:  # it stopped (stdout closed) or printed something else: say what it said
            self.ensure_stopped()
            raise AssertionError(f"corral up is not up (exit status {self.proc.returncode}); it printed "
                                 f"{banner!r} and on stderr {self.proc.stderr.read()!r}\n{self.logs()}")
        secret = (self.state_dir / "secret").read_text().strip()
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}{API}",
                                 headers={"Authorization": f"Bearer {secret}"}, timeout=30)
        return self

    def stop(self, signum: int = signal.SIGTERM) -> tuple[int, str]:
        """Signal `corral up`; its exit status and what it printed on stderr."""
        self.http.close()
        self.proc.send_signal(signum)
        code = self.proc.wait(timeout=60)
        return code, self.proc.stderr.read()

    def ensure_stopped(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def submit(self, marker: str, **fields) -> int:
        # As whoever runs the test: `corral up` started as root runs each task as its (real) user.
        body = {"workdir": str(self.root), "user": getpass.getuser(), "argv": ["sleep", "300"],
                "env": {"PATH": os.environ["PATH"], MARKER: marker}, **fields}
        reply = self.http.post("/jobs", json=body)
        assert reply.status_code == 201, reply.text
        return reply.json()["job_id"]

    def job(self, job_id: int) -> dict:
        return self.http.get(f"/jobs/{job_id}").json()

    def stored_job(self, job_id: int):
        return Store.open(f"sqlite:///{self.state_dir / 'corral.db'}").get_job(job_id)

    def logs(self) -> str:
        logs = sorted((self.state_dir / "logs").glob("*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)


@pytest.fixture
def marker():
    marker = uuid.uuid4().hex
    yield marker
    for proc in psutil.process_iter():  # whatever a failed test left behind
        try:
            if proc.environ().get(MARKER) == marker:
                proc.kill()
        except psutil.Error:
            pass


def test_stopping_corral_up_requeues_running_jobs_kills_their_tasks_and_runs_them_at_the_next_start(
        tmp_path, marker) -> None:
    port = free_port()
    first = CorralUp(tmp_path, port).start()
    try:
        gang = first.submit(marker, nodes=2, gpus_per_node=1)
        no_requeue = first.submit(marker, nodes=1, gpus_per_node=1, requeue=False)
        waiting = first.submit(marker, nodes=2, gpus_per_node=2)
        wait_for(lambda: jobs_alive(marker) == {gang, no_requeue} and len(live_tasks(marker)) == 3,
                 message="3 tasks of the 2 running jobs")
        assert first.job(waiting)["state"] == "PENDING"

        code, stderr = first.stop(signal.SIGTERM)
    finally:
        first.ensure_stopped()

    assert code == 0, stderr
    assert live_tasks(marker) == [], "no process of any job outlives the cluster"
    assert ("corral: stopping: 1 running job requeued, 1 ended NODE_FAIL; 1 pending job stays queued; "
            "the next 'corral up' runs them\n") in stderr
    stopped = first.stored_job(gang)
    assert (stopped.state.value, stopped.restart_count) == ("PENDING", 1)
    assert [h.EVENT for h in stopped.history] == ["cluster-stopped", "requeued"]
    ended = first.stored_job(no_requeue)
    assert ended.state.value == "NODE_FAIL" and ended.history[-1].EVENT == "cluster-stopped"
    assert (first.stored_job(waiting).state.value, first.stored_job(waiting).restart_count) == ("PENDING", 0)

    second = CorralUp(tmp_path, port).start()
    try:
        def gang_runs_again() -> bool:
            assert_no_device_shared(marker)  # checked at every look, from the start on
            tasks = live_tasks(marker)
            return {e["SLURM_JOB_ID"] for e in tasks} == {str(gang)} and len(tasks) == 2
        wait_for(gang_runs_again, message="the requeued gang running again")
        assert {e["SLURM_RESTART_COUNT"] for e in live_tasks(marker)} == {"1"}
        again = second.job(gang)
        assert (again["state"], again["restart_count"]) == ("RUNNING", 1)
        assert second.job(waiting)["state"] == "PENDING", "the gang holds a GPU on each node"
        assert_no_device_shared(marker)
        code, stderr = second.stop(signal.SIGTERM)
    finally:
        second.ensure_stopped()
    assert code == 0 and "1 running job requeued" in stderr
    assert live_tasks(marker) == []


def test_nothing_of_a_job_outlives_corral_up_killed_outright(tmp_path, marker) -> None:
    up = CorralUp(tmp_path, free_port()).start()
    try:
        job = up.submit(marker, nodes=2, gpus_per_node=2)
        wait_for(lambda: len(live_tasks(marker)) == 2, message="the job's 2 tasks")
        up.http.close()
        up.proc.kill()  # no chance to stop anything: its children get SIGTERM from the kernel
        up.proc.wait()
        wait_for(lambda: not live_tasks(marker), timeout_s=20, message=f"job {job}'s tasks gone")
    finally:
        up.ensure_stopped()


def test_an_agent_killed_and_restarted_under_load_adopts_its_jobs_and_their_gpus_go_to_nobody_else(
        cluster_factory, tmp_path, marker) -> None:
    cluster = cluster_factory(nodes=2, gpus=2)
    env = {"PATH": os.environ["PATH"], MARKER: marker}
    go = tmp_path / "go"
    script = f"echo start $SLURMD_NODENAME; while [ ! -e {go} ]; do sleep 0.05; done; echo end $SLURMD_NODENAME"
    gang = cluster.submit(argv=["sh", "-c", script], nodes=2, gpus_per_node=1, env=env)
    single = cluster.submit(argv=["sh", "-c", script], gpus_per_node=1, env=env)
    wait_for(lambda: {(e["SLURM_JOB_ID"], e["SLURMD_NODENAME"]) for e in live_tasks(marker)} == {
        (str(gang), "node1"), (str(gang), "node2"), (str(single), cluster.job(single)["nodelist"])},
        message="the tasks of the 2 running jobs")
    store = Store.open(cluster.db)
    wait_for(lambda: all(run.started for job in (gang, single) for run in store.get_job(job).runs.values()),
             message="the controller knows they started")
    node = cluster.job(single)["nodelist"]  # the node whose GPUs are all taken: its agent is killed
    waiting = cluster.submit(argv=["sleep", "300"], gpus_per_node=2, env=env)
    assert cluster.job(waiting)["state"] == "PENDING"

    cluster.kill_agent(node)
    assert jobs_alive(marker) == {gang, single}, "the tasks outlive the killed agent"
    cluster.start_agent(node)
    log = tmp_path / f"agent-{node}.log"
    wait_for(lambda: "registered" in log.read_text().rpartition("adopted job")[2], message="re-registration")
    for _ in range(20):  # a while after the new registration: the jobs run on, their GPUs stay theirs
        assert {cluster.job(j)["state"] for j in (gang, single)} == {"RUNNING"}
        assert cluster.job(waiting)["state"] == "PENDING"
        assert_no_device_shared(marker)
        time.sleep(0.05)
    go.touch()

    for job in (gang, single):
        done = cluster.wait_state(job, "COMPLETED")
        assert done["exit_code"] == 0
    assert sorted((tmp_path / f"slurm-{gang}.out").read_text().splitlines()) == [
        "end node1", "end node2", "start node1", "start node2"]
    assert (tmp_path / f"slurm-{single}.out").read_text() == f"start {node}\nend {node}\n"
    cluster.wait_state(waiting, "RUNNING")
    wait_for(lambda: jobs_alive(marker) == {waiting}, message="the waiting job's task, and nothing else")
    assert_no_device_shared(marker)
    cluster.http.post(f"{API}/jobs/{waiting}/cancel")
    cluster.wait_state(waiting, "CANCELLED")
    wait_for(lambda: not live_tasks(marker), message="no process of any job left")


def test_an_adopted_jobs_time_limit_still_ends_it(cluster_factory, tmp_path, marker) -> None:
    cluster = cluster_factory(nodes=1, gpus=2)
    env = {"PATH": os.environ["PATH"], MARKER: marker}
    job = cluster.submit(argv=["sleep", "300"], gpus_per_node=1, time_limit_s=4, env=env)
    wait_for(lambda: jobs_alive(marker) == {job}, message="the job's task")
    cluster.kill_agent("node1")
    cluster.start_agent("node1")
    log = tmp_path / "agent-node1.log"
    wait_for(lambda: f"adopted job {job}" in log.read_text(), message="the adoption")
    assert cluster.wait_state(job, "TIMEOUT")["state"] == "TIMEOUT"
    wait_for(lambda: not live_tasks(marker), message="no process of the job left")
    assert "DUE TO TIME LIMIT" in (tmp_path / f"slurm-{job}.out").read_text()


def test_an_agent_back_after_its_node_was_declared_down_kills_the_failed_job_before_it_runs_another(
        cluster_factory, tmp_path, marker) -> None:
    # Without self-fencing the task outlives its node's timeout (with it, its leader has killed it by then:
    # decision 0017); the agent's kill on registering is what is tested here.
    cluster = cluster_factory(nodes=1, gpus=2, config="kill_grace_s = 2\nnode_timeout_s = 2\nself_fencing = false\n")
    env = {"PATH": os.environ["PATH"], MARKER: marker}
    lost = cluster.submit(argv=["sleep", "300"], gpus_per_node=2, env=env, requeue=False)
    wait_for(lambda: jobs_alive(marker) == {lost}, message="the job's task")
    cluster.kill_agent("node1")
    cluster.wait_state(lost, "NODE_FAIL")
    after = cluster.submit(argv=["sleep", "300"], gpus_per_node=2, env=env)
    assert jobs_alive(marker) == {lost}, "nobody watches the failed job's task while the agent is away"
    assert cluster.job(after)["state"] == "PENDING", "a down node's GPUs go to nobody"

    cluster.start_agent("node1")
    def only_one_job_at_a_time() -> bool:
        assert_no_device_shared(marker)
        return jobs_alive(marker) == {after}
    wait_for(only_one_job_at_a_time, message="the new job running, the failed one gone")
    cluster.http.post(f"{API}/jobs/{after}/cancel")
    cluster.wait_state(after, "CANCELLED")
    wait_for(lambda: not live_tasks(marker), message="no process of either job left")
