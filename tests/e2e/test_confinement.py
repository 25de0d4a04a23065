"""A root agent runs jobs as their users, in cgroups, through a real controller (tests/e2e/harness.py):
users made with useradd, a cgroup2 hierarchy mounted by the test."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from corral.agent.cgroup_hierarchies import v1_mount
from tests.e2e.harness import Cluster, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")

PATH = {"PATH": os.environ["PATH"]}


@pytest.fixture
def shared_root():
    """Where the cluster keeps its files: every user can reach the agents' spools (scripts live there)."""
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-confine-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def alice():
    name = f"crl{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-d", f"/home/{name}", "-s", "/bin/sh", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


@pytest.fixture
def cgroup_root():
    """The agent's --cgroup-root, in a cgroup2 hierarchy mounted for the test. Every cgroup2 mount shows the
    host's one hierarchy (other tests' trees too): only this test's tree is removed afterwards."""
    mount = Path(tempfile.mkdtemp(prefix="corral-cg2-"))
    try:
        subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        mount.rmdir()
        pytest.skip(f"cannot mount a cgroup2 hierarchy here: {exc}")
    root = mount / f"corral-{secrets.token_hex(3)}"
    yield root
    # The agent's tree, in the cgroup2 mount and in the v1 hierarchies it took controllers from.
    for tree in [root, *cgroup_trees(root.name)]:
        for path in sorted((p for p in tree.glob("**") if p.is_dir()), reverse=True):
            path.rmdir()
    subprocess.run(["umount", str(mount)], check=False)
    mount.rmdir()


@pytest.fixture
def gpu_device_dir():
    """Device files for two simulated GPUs, made with mknod (major 195 as NVIDIA's). No driver serves them
    here: opening one fails with ENXIO, unless the job's cgroup refuses it first (EPERM)."""
    directory = Path(tempfile.mkdtemp(prefix="corral-e2e-dev-"))
    for index in (0, 1):
        os.mknod(directory / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    yield directory
    shutil.rmtree(directory)


def start(root: Path, *agent_args: str, gpus: int = 0) -> Cluster:
    return Cluster(root, nodes=1, gpus=gpus, agent_args=agent_args).start()


def users_dir(root: Path, user: pwd.struct_passwd) -> Path:
    path = root / user.pw_name
    path.mkdir(mode=0o700)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


def test_jobs_run_as_their_user_and_the_node_says_how(shared_root, alice):
    cluster = start(shared_root, "--no-cgroups")
    try:
        workdir = users_dir(shared_root, alice)
        job_id = cluster.submit(script="#!/bin/sh\nid -un\n", batch=True, user=alice.pw_name, uid=alice.pw_uid,
                                workdir=str(workdir), env=PATH)
        assert cluster.wait_state(job_id, "COMPLETED", "FAILED")["state"] == "COMPLETED"
        output = workdir / f"slurm-{job_id}.out"
        assert output.read_text() == f"{alice.pw_name}\n"
        assert output.stat().st_uid == alice.pw_uid

        passwd = cluster.submit(argv=["echo", "owned"], user=alice.pw_name, workdir=str(workdir),
                                output="/etc/passwd", env=PATH)
        job = cluster.wait_state(passwd, "FAILED")
        assert job["reason"] == (f"LaunchFailed:cannot open output file /etc/passwd as user {alice.pw_name}: "
                                 f"Permission denied")
        assert "owned" not in Path("/etc/passwd").read_text()

        unknown = cluster.submit(argv=["true"], user="nosuchuser-corral", workdir=str(shared_root), env=PATH)
        reason = cluster.wait_state(unknown, "FAILED")["reason"]
        assert reason == "LaunchFailed:user 'nosuchuser-corral' unknown on node1"

        # Root submitted it on the controller's host, so the controller took it; this agent was started
        # without --allow-root-jobs, so nothing runs as root here.
        as_root = cluster.submit(argv=["touch", str(shared_root / "root-ran")], user="root", workdir=str(shared_root),
                                 env=PATH)
        reason = cluster.wait_state(as_root, "FAILED")["reason"]
        assert reason == ("LaunchFailed:a job as root (user 'root', uid 0) is refused on node1: its agent runs root "
                          "jobs only with --allow-root-jobs")
        assert not (shared_root / "root-ran").exists()

        [node] = cluster.nodes()
        assert (node["run_as_user"], node["agent_user"]) == (True, "root")
        assert node["cgroups"] == "cgroups off (--no-cgroups)"
    finally:
        cluster.stop()


def test_nothing_a_job_started_outlives_it_in_its_cgroup(shared_root, cgroup_root):
    root = cgroup_root
    cluster = start(shared_root, "--allow-root-jobs", "--cgroup-root", str(root))
    try:
        [node] = cluster.nodes()
        assert node["cgroups"].startswith("cgroup v2 tracking")
        assert f"v2 at {root}" in node["cgroups"]
        escape = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > escaped.pid"
        job_id = cluster.submit(argv=["sh", "-c", escape], user="root", workdir=str(shared_root), env=PATH)
        assert cluster.wait_state(job_id, "COMPLETED", "FAILED")["state"] == "COMPLETED"
        escaped = int((shared_root / "escaped.pid").read_text())
        wait_for(lambda: not Path(f"/proc/{escaped}").exists(), timeout_s=5, message="the setsid child is gone")
        wait_for(lambda: not (root / f"job_{job_id}").exists(), timeout_s=5, message="the job's cgroup is removed")
        assert not [path for tree in cgroup_trees(root.name) for path in tree.glob("job_*")]
    finally:
        cluster.stop()


def cgroup_trees(name: str) -> list[Path]:
    """The agent's tree in each v1 hierarchy this host mounts (where it takes what cgroup v2 lacks)."""
    return [mount / name for c in ("memory", "cpuset", "devices", "freezer", "pids") if (mount := v1_mount(c))]


PROBE = """import errno, os
print(os.environ["CUDA_VISIBLE_DEVICES"])
print(sorted(os.sched_getaffinity(0)))
for index in (0, 1):
    try:
        os.close(os.open(os.path.join(os.environ["DEVICES"], f"nvidia{index}"), os.O_RDWR))
    except OSError as exc:
        print(index, errno.errorcode[exc.errno])
"""


def test_memory_cpus_and_gpus_are_the_jobs_own(shared_root, cgroup_root, gpu_device_dir):
    root = cgroup_root
    cluster = start(shared_root, "--allow-root-jobs", "--cgroup-root", str(root), "--gpu-device-dir",
                    str(gpu_device_dir), gpus=2)
    try:
        [node] = cluster.nodes()
        if "memory" not in node["cgroups"].partition(" (")[0]:
            pytest.skip(f"no memory controller here: {node['cgroups']}")
        hog = cluster.submit(argv=["python3", "-c", "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"],
                             mem_mib=32, user="root", workdir=str(shared_root), env=PATH)
        job = cluster.wait_state(hog, "OUT_OF_MEMORY", "COMPLETED", "FAILED")
        assert job["state"] == "OUT_OF_MEMORY", job

        if "cpuset" not in node["cgroups"].partition(" (")[0] or "devices" not in node["cgroups"].partition(" (")[0]:
            pytest.skip(f"no cpuset or devices controller here: {node['cgroups']}")
        probe = cluster.submit(argv=["python3", "-c", PROBE], gpus=1, user="root", workdir=str(shared_root),
                               env={**PATH, "DEVICES": str(gpu_device_dir)}, output="probe.out")
        assert cluster.wait_state(probe, "COMPLETED", "FAILED")["state"] == "COMPLETED"
        mine, cpus, *opened = (shared_root / "probe.out").read_text().splitlines()
        assert cpus == "[0]"  # one CPU (the job's default), the lowest of the agent's
        assert sorted(opened) == sorted([f"{mine} ENXIO", f"{1 - int(mine)} EPERM"])
        wait_for(lambda: not [p for tree in cgroup_trees(root.name) for p in tree.glob("job_*")], timeout_s=5,
                 message="the jobs' cgroups are removed from every hierarchy")
    finally:
        cluster.stop()


FORK_BOMB = """import errno, os, time
started = 0
try:
    while started < 100000:
        if os.fork() == 0:
            time.sleep(300)
            os._exit(0)
        started += 1
except OSError as exc:
    print(started, errno.errorcode[exc.errno], flush=True)
"""


def test_a_fork_bomb_stops_at_the_jobs_pids_limit_and_the_node_is_fine(shared_root, cgroup_root):
    root = cgroup_root
    cluster = start(shared_root, "--allow-root-jobs", "--cgroup-root", str(root), "--pids-max", "64")
    try:
        [node] = cluster.nodes()
        if "pids" not in node["cgroups"].partition(" (")[0]:
            pytest.skip(f"no pids controller here: {node['cgroups']}")
        assert "; at most 64 processes and threads per job" in node["cgroups"]
        bomb = cluster.submit(argv=["python3", "-c", FORK_BOMB], user="root", workdir=str(shared_root), env=PATH,
                              output="bomb.out")
        assert cluster.wait_state(bomb, "COMPLETED", "FAILED")["state"] == "COMPLETED"
        started, error = (shared_root / "bomb.out").read_text().split()
        assert error == "EAGAIN" and 0 < int(started) < 64, (started, error)
        wait_for(lambda: not [p for tree in [root, *cgroup_trees(root.name)] for p in tree.glob("job_*")],
                 timeout_s=10, message="the bomb's processes are killed and its cgroups removed")
        after = cluster.submit(argv=["sh", "-c", "echo fine"], user="root", workdir=str(shared_root), env=PATH,
                               output="after.out")
        assert cluster.wait_state(after, "COMPLETED", "FAILED")["state"] == "COMPLETED"
        assert (shared_root / "after.out").read_text() == "fine\n"
        assert cluster.nodes()[0]["state"] == "idle"
    finally:
        cluster.stop()
