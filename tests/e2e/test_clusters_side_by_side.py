"""Clusters on one host never touch each other's jobs (issue 21, item 2): two root `corral up` clusters
whose nodes and jobs are named alike, and a user's cluster beside root's (tests/e2e/side_by_side.py).

Before, every agent's cgroup tree was corral-<node>: the second cluster's agents killed the first's jobs as
leftovers when they started, and the end of its job 1 (cgroup.kill of job_1) killed the first's job 1; the
second took over /etc/corral/cluster.json and removed it when it stopped."""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.harness import free_port, wait_for
from tests.e2e.side_by_side import (
    FINAL,
    UpCluster,
    clusters_user,
    delegated_cgroup,
    forget,
    kill_marked,
    marked_jobs,
    read_json,
    remove_tree,
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (useradd, root's clusters)")]


@pytest.fixture
def shared_root():
    """The clusters' files, where every user may reach them; the host's cluster.json of the test's own."""
    root = Path(tempfile.mkdtemp(prefix="corral-clusters-"))
    root.chmod(0o755)
    marker = uuid.uuid4().hex
    yield root, marker
    kill_marked(marker)
    remove_tree(root)


def root_cluster(root: Path, name: str, env: dict[str, str]) -> UpCluster:
    return UpCluster(root / name, free_port(), env)


def test_two_root_clusters_named_alike_never_kill_each_others_jobs_and_the_host_file_stays_the_firsts(
        shared_root) -> None:
    root, marker = shared_root
    system_file = root / "etc" / "cluster.json"
    env = {"CORRAL_SYSTEM_CLUSTER_FILE": str(system_file), "XDG_CONFIG_HOME": str(root / "config")}
    first, second = root_cluster(root, "a", env), root_cluster(root, "b", env)
    try:
        first.start()
        long_job = first.submit(["sleep", "300"], marker)
        wait_for(lambda: marked_jobs(marker).get(long_job), timeout_s=60, message="the first cluster's job runs")
        second.start()  # its agents, named node1 and node2 too, start: they kill what they find as leftovers
        time.sleep(1)  # such a kill is at once
        assert marked_jobs(marker).get(long_job), "the first cluster's job survived the second's start"
        assert first.cluster_id != second.cluster_id
        assert [c.http.get("/health").json()["cluster_id"] for c in (first, second)] == \
            [first.cluster_id, second.cluster_id], "what a machine joining each is told"
        trees = {c.cluster_id: {n["name"]: n["cgroups"] for n in c.nodes()} for c in (first, second)}
        for cluster_id, by_node in trees.items():
            if all(text.startswith("cgroup ") for text in by_node.values()):  # where the host gives cgroups
                assert all(f"/corral-{cluster_id}-{node}" in text for node, text in by_node.items()), trees

        same_id = second.submit(["sleep", "1"], marker)  # the second cluster's job of the same number ends
        assert same_id == long_job
        wait_for(lambda: second.job(same_id)["state"] in FINAL, timeout_s=60, message="the second's job ends")
        assert second.job(same_id)["state"] == "COMPLETED", second.job(same_id)
        time.sleep(1)  # a kill of the cgroup would have been at once
        assert marked_jobs(marker).get(long_job), "the first cluster's job survived the second's"
        assert first.job(long_job)["state"] == "RUNNING"

        own_copy = Path(f"/run/corral/{second.port}/cluster.json")
        assert (f"({system_file} still serves the cluster at http://127.0.0.1:{first.port}: this cluster's users set "
                f"CORRAL_SYSTEM_CLUSTER_FILE={own_copy})") in second.banner
        assert f"CORRAL_URL=http://127.0.0.1:{second.port} CORRAL_SECRET_FILE={second.state_dir}/secret" \
            in second.banner, "the user's own cluster.json stays the first cluster's too"
        assert read_json(system_file)["cluster_id"] == first.cluster_id
        assert read_json(own_copy)["url"] == f"http://127.0.0.1:{second.port}"

        code, _ = second.stop()
        assert code == 0
        assert read_json(system_file)["cluster_id"] == first.cluster_id, "the host's file still serves the first"
        assert not own_copy.exists()
        assert first.job(long_job)["state"] == "RUNNING" and marked_jobs(marker).get(long_job)

        code, _ = first.stop()
        assert code == 0 and not system_file.exists()
    finally:
        for cluster in (second, first):
            cluster.ensure_stopped()
            forget(cluster)


def test_a_users_cluster_runs_jobs_beside_roots_and_says_it_has_no_cgroups(shared_root) -> None:
    root, marker = shared_root
    env = {"CORRAL_SYSTEM_CLUSTER_FILE": str(root / "etc" / "cluster.json"), "XDG_CONFIG_HOME": str(root / "config")}
    roots = root_cluster(root, "root", env)
    with clusters_user() as user:
        users = UpCluster(root / "user", free_port(), {
            "HOME": str(root / "user"), "XDG_CONFIG_HOME": str(root / "user" / "config"),
            "XDG_STATE_HOME": str(root / "user" / "state-home"), "CORRAL_SYSTEM_CLUSTER_FILE": env[
                "CORRAL_SYSTEM_CLUSTER_FILE"], "USER": user.pw_name, "LOGNAME": user.pw_name}, user=user)
        try:
            roots.start()
            long_job = roots.submit(["sleep", "300"], marker)
            wait_for(lambda: marked_jobs(marker).get(long_job), timeout_s=60, message="root's job runs")
            users.start()
            nodes = users.nodes()
            not_delegated = ("the agent is not root, and its own cgroup is not delegated to its user (run it in one "
                             "that is, e.g. systemd-run --user --scope -p Delegate=yes, or give --cgroup-root)")
            assert [node["cgroups"] for node in nodes] == [f"no cgroups: {not_delegated}"] * 2
            assert f"  isolation: dev mode: as {user.pw_name}, no cgroups (node1: {not_delegated})\n" in users.banner
            listed = subprocess.run([sys.executable, "-m", "corral.cli.main", "nodes"], capture_output=True, text=True,
                                    env={**os.environ, "CORRAL_URL": f"http://127.0.0.1:{users.port}",
                                         "CORRAL_SECRET_FILE": str(users.state_dir / "secret")}, timeout=60)
            assert listed.returncode == 0, listed.stderr
            assert all(line.endswith("no cgroups") for line in listed.stdout.splitlines()[1:]), listed.stdout
            assert listed.stderr == ("corral: 2 nodes run jobs without cgroups (node1, node2); node1: no cgroups: "
                                     f"{not_delegated}\n")
            ids = [users.submit(["sh", "-c", "id -un"], marker) for _ in range(3)]
            for job_id in ids:
                wait_for(lambda job_id=job_id: users.job(job_id)["state"] in FINAL, timeout_s=60,
                         message=f"the user's job {job_id} ends")
                assert users.job(job_id)["state"] == "COMPLETED", users.job(job_id)
            assert (root / "user" / f"slurm-{ids[0]}.out").read_text() == f"{user.pw_name}\n"
            assert marked_jobs(marker).get(long_job) and roots.job(long_job)["state"] == "RUNNING"
            assert users.stop()[0] == 0
            assert marked_jobs(marker).get(long_job) and roots.job(long_job)["state"] == "RUNNING"
            assert roots.stop()[0] == 0
        finally:
            for cluster in (users, roots):
                cluster.ensure_stopped()
            forget(roots)


def test_a_users_cluster_in_a_cgroup_delegated_to_it_keeps_its_jobs_there(shared_root) -> None:
    """As under `systemd-run --user --scope -p Delegate=yes corral up`: the user's agents make their trees in
    the cgroup the user was given, and track their jobs there, beside root's cgroups."""
    root, marker = shared_root
    with clusters_user() as user, contextlib.ExitStack() as stack:
        try:
            delegated = stack.enter_context(delegated_cgroup(user))
        except OSError as exc:
            pytest.skip(f"cannot make a cgroup v2 directory here: {exc}")
        users = UpCluster(root / "user", free_port(), {
            "HOME": str(root / "user"), "XDG_CONFIG_HOME": str(root / "user" / "config"),
            "CORRAL_SYSTEM_CLUSTER_FILE": str(root / "etc" / "cluster.json"), "USER": user.pw_name}, user=user)
        try:
            users.start(cgroup=delegated)
            tree = delegated / f"corral-{users.cluster_id}-node1"
            assert f"  isolation: dev mode: as {user.pw_name}, cgroup v2 tracking" in users.banner, users.banner
            assert f"v2 at {tree}" in users.nodes()[0]["cgroups"]
            job_id = users.submit(["cat", "/proc/self/cgroup"], marker)
            wait_for(lambda: users.job(job_id)["state"] in FINAL, timeout_s=60, message="the user's job ends")
            assert users.job(job_id)["state"] == "COMPLETED", users.job(job_id)
            lines = (root / "user" / f"slurm-{job_id}.out").read_text().splitlines()
            node = users.job(job_id)["nodelist"]
            assert [line for line in lines if line.startswith("0::")] == [
                f"0::/{delegated.name}/corral-{users.cluster_id}-{node}/job_{job_id}/batch"], lines
            assert users.stop()[0] == 0
            assert not tree.exists(), "the agent removed its tree, emptied, as it stopped"
        finally:
            users.ensure_stopped()


JOBS_EACH = 100


def test_two_root_clusters_and_a_users_run_100_jobs_each_at_once_and_every_one_completes(shared_root) -> None:
    """The issue's check. Every cluster numbers its jobs 1..100 on nodes node1 and node2, and runs them at
    the same time as the others: a job ending in one cluster must kill nothing in another. Takes about 25 s
    (the jobs 9 s of it) on 2 cores shared with other test runs, load average 5-6."""
    root, marker = shared_root
    env = {"CORRAL_SYSTEM_CLUSTER_FILE": str(root / "etc" / "cluster.json"), "XDG_CONFIG_HOME": str(root / "config")}
    with clusters_user() as user:
        clusters = [root_cluster(root, "a", env), root_cluster(root, "b", env),
                    UpCluster(root / "user", free_port(), {
                        "HOME": str(root / "user"), "XDG_CONFIG_HOME": str(root / "user" / "config"),
                        "CORRAL_SYSTEM_CLUSTER_FILE": env["CORRAL_SYSTEM_CLUSTER_FILE"], "USER": user.pw_name,
                        "LOGNAME": user.pw_name}, user=user)]
        try:
            for cluster in clusters:
                cluster.start()
            started = time.monotonic()
            for _ in range(JOBS_EACH):  # interleaved: the clusters' jobs of one number run together
                for cluster in clusters:
                    cluster.submit(["sleep", "1"], marker, gpus_per_node=0)
            for cluster in clusters:
                wait_for(lambda cluster=cluster: all(job["state"] in FINAL for job in cluster.jobs()),
                         timeout_s=600, interval_s=1.0, message=f"the jobs of {cluster.root.name} end")
            took_s = time.monotonic() - started
            for cluster in clusters:
                states = {job["id"]: (job["state"], job["reason"]) for job in cluster.jobs()}
                assert sorted(states) == list(range(1, JOBS_EACH + 1))
                failed = {job_id: state for job_id, state in states.items() if state[0] != "COMPLETED"}
                assert not failed, f"{cluster.root.name}: {failed}"
            print(f"{len(clusters)} clusters x {JOBS_EACH} jobs: all COMPLETED in {took_s:.0f} s")
            for cluster in clusters:
                assert cluster.stop()[0] == 0
        finally:
            for cluster in clusters:
                cluster.ensure_stopped()
                forget(cluster)
