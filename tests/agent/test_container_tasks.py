"""A launch's container on a node (agent/container_tasks.py), for real: an image built here, a Unix user made
with useradd, runc. What the job and step runners rely on: the image leased while tasks run, the task's
environment and working directory inside, and nothing of the container left once its tasks are gone."""
from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from corral.agent.container_images import ImageCache, node_architecture
from corral.agent.container_tasks import ContainerStartError, ContainerSupport, TaskContainer
from corral.agent.identity import TaskIdentity
from corral.protocol import ContainerLaunch
from tests.agent.container_image import BUSYBOX, build_image, entry

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or BUSYBOX is None
    or not all(shutil.which(tool) for tool in ("runc", "unshare", "newuidmap", "useradd")),
    reason="needs root, runc, uidmap, busybox-static and useradd")


@pytest.fixture
def shared():
    root = Path(tempfile.mkdtemp(prefix="corral-ctrwire-tasks-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def identity():
    name = f"ctrwire{secrets.token_hex(3)}"
    sub = 500_000 + secrets.randbelow(100_000)
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", f"{sub}-{sub}", "--add-subgids", f"{sub}-{sub}", name], check=True)
    user = pwd.getpwnam(name)
    yield TaskIdentity(name, user.pw_uid, user.pw_gid, (user.pw_gid,), user.pw_dir, "/bin/sh")
    subprocess.run(["userdel", name], check=False)


def container(shared: Path, identity: TaskIdentity, image: Path, **launch) -> TaskContainer:
    support = ContainerSupport(ImageCache(shared / "cache", 1 << 30), {})
    return TaskContainer(ContainerLaunch(image=str(image), **launch), support, job_dir=shared / "job7",
                         lease="job7.0", identity=identity, gpus=[])


def test_a_container_whose_init_ignores_sigterm_is_gone_once_runc_is_killed(shared, identity):
    """runc SIGKILLed (a kill's grace over) left its container running in a session of its own: the old
    close() removed the bundle and leaked it. Now close() kills it, and gives the image's lease back."""
    sleep = [entry("bin/sleep", tarfile.SYMTYPE, link="busybox")]
    image = build_image(shared / "image.tar", node_architecture(), [sleep])
    task = container(shared, identity, image)
    asyncio.run(task.open())
    argv = task.task_argv(0, ["sh", "-c", "trap '' TERM; echo $$ > /tmp/pid; sleep 300"], {"PATH": "/nowhere"},
                          "/")
    runc = subprocess.Popen(argv, user=identity.uid, group=identity.gid, extra_groups=[], cwd="/",
                            start_new_session=True)
    state = shared / "job7" / "bundles" / "job7.0.0" / "state"
    deadline = time.monotonic() + 20
    while not list(state.glob("*/state.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    [record] = list(state.glob("*/state.json"))
    import json

    init = json.loads(record.read_text())["init_process_pid"]
    os.killpg(runc.pid, signal.SIGTERM)  # forwarded to the container's PID 1, which ignores it
    time.sleep(0.5)
    assert runc.poll() is None and Path(f"/proc/{init}").exists()
    os.killpg(runc.pid, signal.SIGKILL)
    runc.wait()
    assert Path(f"/proc/{init}").exists()  # what runc leaves behind
    cache = shared / "cache"
    [entry_dir] = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert [p.name for p in (entry_dir / "leases").iterdir()] == ["job7.0"]
    task.close()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{init}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{init}").exists() or Path(f"/proc/{init}/stat").read_text().split()[2] == "Z"
    assert list((entry_dir / "leases").iterdir()) == [] and not (shared / "job7" / "bundles" / "job7.0.0").exists()


def test_the_tasks_environment_goes_in_but_not_the_nodes_path_and_the_workdir_only_where_mounted(shared,
                                                                                               identity):
    image = build_image(shared / "image.tar", node_architecture())
    work = shared / "work"
    work.mkdir()
    os.chown(work, identity.uid, identity.gid)
    env = {"PATH": "/opt/host/bin", "SLURM_PROCID": "3", "CUDA_VISIBLE_DEVICES": "1"}
    image_path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for launch, cwd, expected in [
        ({}, str(work), f"/\n3 1 {image_path}\n"),
        ({"mounts": f"{work}"}, str(work), f"{work}\n3 1 {image_path}\n"),
        ({"workdir": "/etc", "env": "PATH"}, str(work), "/etc\n3 1 /opt/host/bin\n"),
    ]:
        task = container(shared, identity, image, **launch)
        asyncio.run(task.open())
        argv = task.task_argv(0, ["/bin/sh", "-c", 'pwd; echo "$SLURM_PROCID $CUDA_VISIBLE_DEVICES $PATH"'], env, cwd)
        done = subprocess.run(argv, user=identity.uid, group=identity.gid, extra_groups=[], cwd="/",
                              capture_output=True, text=True, timeout=60)
        task.close()
        assert done.stdout == expected, (launch, done.stderr)


def test_a_named_container_alone_needs_one_made_by_an_earlier_step(shared, identity):
    support = ContainerSupport(ImageCache(shared / "cache", 1 << 30), {})
    task = TaskContainer(ContainerLaunch(name="env1"), support, job_dir=shared / "job7", lease="job7.1",
                         identity=identity, gpus=[])
    with pytest.raises(ContainerStartError, match="no container named 'env1' on this node for this job: start it "
                                                  "with --container-image"):
        asyncio.run(task.open())


def test_a_node_without_the_runtime_refuses_and_says_where_containers_run(shared, identity):
    task = TaskContainer(ContainerLaunch(image="/x.tar"), None, job_dir=shared / "job7", lease="job7.1",
                         identity=identity, gpus=[])
    with pytest.raises(ContainerStartError, match="this node cannot run containers.*feature runc in corral nodes"):
        asyncio.run(task.open())


def test_a_container_name_that_would_leave_the_jobs_directory_is_refused_on_the_node(shared, identity):
    """The API refuses such a name; the agent checks again, as the name becomes a path of the job's."""
    support = ContainerSupport(ImageCache(shared / "cache", 1 << 30), {})
    task = TaskContainer(ContainerLaunch(name="../../etc"), support, job_dir=shared / "job7", lease="job7.1",
                         identity=identity, gpus=[])
    with pytest.raises(ContainerStartError, match="use 1 to 64 letters, digits, - and _"):
        asyncio.run(task.open())
