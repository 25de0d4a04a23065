"""Tasks run as the job's user (a root agent) and inside per-job cgroups: real users made with useradd,
a real cgroup2 hierarchy mounted by the test."""
from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from corral.agent.cgroups import CgroupTree
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.agent.tasks import Confinement
from corral.protocol import NodeFinished, NodeStarted

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")

AS_USER = Confinement(run_as_user=True)


def make_user() -> pwd.struct_passwd:
    name = f"crl{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-d", f"/home/{name}", "-s", "/bin/sh", name], check=True)
    return pwd.getpwnam(name)


@pytest.fixture
def users():
    made: list[pwd.struct_passwd] = []

    def make() -> pwd.struct_passwd:
        made.append(make_user())
        return made[-1]

    yield make
    for user in made:
        subprocess.run(["userdel", user.pw_name], check=False)


@pytest.fixture
def shared_dir():
    """A directory every user can reach (pytest's tmp_path is under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="corral-confine-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def workdir_of(user: pwd.struct_passwd, parent: Path) -> Path:
    path = parent / user.pw_name
    path.mkdir(mode=0o700)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


def run(launch, spool: Path, agent_env, confinement: Confinement = AS_USER):
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive():
        return [event async for event in runner.run()]

    return asyncio.run(drive())


def test_a_batch_job_runs_as_its_user_in_the_submit_directory(users, shared_dir, make_launch, agent_env):
    alice = users()
    workdir = workdir_of(alice, shared_dir)
    script = '#!/bin/sh\nid -un\nid -g\npwd\necho "$HOME $USER $LOGNAME $SHELL"\n'
    launch = make_launch(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir), script=script, argv=[],
                         batch=True)
    started, finished = run(launch, shared_dir / "spool", agent_env)
    assert isinstance(started, NodeStarted) and finished.error is None, finished
    output = workdir / "slurm-7.out"
    name, gid, cwd, variables = output.read_text().splitlines()
    assert (name, int(gid), cwd) == (alice.pw_name, alice.pw_gid, str(workdir))
    assert variables == f"{alice.pw_dir} {alice.pw_name} {alice.pw_name} /bin/sh"
    assert (output.stat().st_uid, output.stat().st_gid) == (alice.pw_uid, alice.pw_gid)


def test_supplementary_groups_are_the_users(users, shared_dir, make_launch, agent_env):
    alice = users()
    group = f"crlg{secrets.token_hex(3)}"
    subprocess.run(["groupadd", group], check=True)
    try:
        subprocess.run(["usermod", "-aG", group, alice.pw_name], check=True)
        workdir = workdir_of(alice, shared_dir)
        launch = make_launch(user=alice.pw_name, workdir=str(workdir), argv=["id", "-Gn"])
        _, finished = run(launch, shared_dir / "spool", agent_env)
        assert finished.error is None
        assert group in (workdir / "slurm-7.out").read_text().split()
    finally:
        subprocess.run(["groupdel", group], check=False)


def test_output_where_the_user_cannot_write_fails_the_job_and_writes_nothing(users, shared_dir, make_launch,
                                                                             agent_env):
    alice, bob = users(), users()
    workdir = workdir_of(alice, shared_dir)
    private = workdir_of(bob, shared_dir)  # 0700, bob's
    forbidden = Path("/etc") / f"corral-test-{secrets.token_hex(4)}"
    for target in (forbidden, private / "x.out"):
        launch = make_launch(user=alice.pw_name, workdir=str(workdir), argv=["echo", "written"], output=str(target))
        [finished] = run(launch, shared_dir / "spool", agent_env)
        assert isinstance(finished, NodeFinished)
        assert finished.error == (f"cannot open output file {target} as user {alice.pw_name}: "
                                  f"Permission denied")
        assert not target.exists()


def test_a_user_unknown_on_the_node_fails_the_job_with_the_reason(shared_dir, make_launch, agent_env):
    launch = make_launch(user="nosuchuser-corral", workdir=str(shared_dir), argv=["true"])
    [finished] = run(launch, shared_dir / "spool", agent_env)
    assert finished.error == "user 'nosuchuser-corral' unknown on node1"
    assert [t.exit_code for t in finished.tasks] == [1]
    assert not (shared_dir / "slurm-7.out").exists()


def test_a_workdir_the_user_cannot_enter_fails_the_job(users, shared_dir, make_launch, agent_env):
    alice, bob = users(), users()
    launch = make_launch(user=alice.pw_name, workdir=str(workdir_of(bob, shared_dir)), argv=["true"])
    [finished] = run(launch, shared_dir / "spool", agent_env)
    assert finished.error == f"working directory {shared_dir / bob.pw_name} is not accessible to user {alice.pw_name}"


def test_a_development_mode_agent_runs_tasks_as_itself(shared_dir, make_launch, agent_env):
    launch = make_launch(user="nosuchuser-corral", workdir=str(shared_dir), argv=["id", "-u"])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement())
    assert finished.error is None
    assert (shared_dir / "slurm-7.out").read_text().strip() == str(os.geteuid())


# -- cgroups

@pytest.fixture
def cgroup_tree():
    mount = Path(tempfile.mkdtemp(prefix="corral-cg2-"))
    try:
        subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        mount.rmdir()
        pytest.skip(f"cannot mount a cgroup2 hierarchy here: {exc}")
    tree = CgroupTree.open(mount / f"corral-test-{secrets.token_hex(3)}")
    yield tree
    for path in sorted((p for p in tree.root.rglob("*") if p.is_dir()), reverse=True):
        path.rmdir()  # cgroups left empty by the test (files in them cannot be removed, only the directory)
    tree.root.rmdir()
    subprocess.run(["umount", str(mount)], check=False)
    mount.rmdir()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status").read_text()
    return "State:\tZ" not in status


def test_a_process_that_left_the_jobs_session_dies_with_the_job(cgroup_tree, shared_dir, make_launch, agent_env):
    workdir = shared_dir
    launch = make_launch(user="root", workdir=str(workdir), argv=[
        "sh", "-c", "setsid sh -c 'echo $$ > escaped.pid; exec sleep 300' </dev/null >/dev/null 2>&1 & "
                    "while [ ! -s escaped.pid ]; do sleep 0.01; done"])
    started, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.error is None, finished
    escaped = int((workdir / "escaped.pid").read_text())
    deadline = time.monotonic() + 2
    while alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(escaped), "the setsid child outlived its job"
    assert not (cgroup_tree.root / "job_7").exists()


def test_a_job_over_its_memory_ends_out_of_memory(cgroup_tree, shared_dir, make_launch, agent_env):
    if "memory" not in cgroup_tree.controllers:
        print(f"skipped: {cgroup_tree.describe()}")
        pytest.skip(f"no memory controller in this cgroup2 hierarchy ({cgroup_tree.describe()})")
    launch = make_launch(user="root", workdir=str(shared_dir), mem_per_node_mib=32,
                         argv=["python3", "-c", "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.oom_killed and finished.tasks[0].signal == 9


# -- what the agent says about itself

def start_agent(controller, tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    secret = tmp_path / "secret"
    secret.write_text("test-secret\n")
    return subprocess.Popen(
        [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret),
         "--node", "n1", "--gpus", "0", "--cpus", "1", "--mem-mib", "512", "--spool", str(tmp_path / "spool"),
         *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def registration_of(controller, tmp_path: Path, *args: str):
    agent = start_agent(controller, tmp_path, *args)
    try:
        return controller.wait(lambda: controller.registrations, timeout_s=10)[-1], agent
    finally:
        agent.terminate()
        agent.wait()


def test_a_root_agent_registers_running_tasks_as_their_users_and_why_it_has_no_cgroups(controller, tmp_path):
    not_cgroup2 = tmp_path / "not-a-cgroup"
    registration, agent = registration_of(controller, tmp_path, "--cgroup-root", str(not_cgroup2))
    assert registration.run_as_user and registration.agent_user == "root"
    assert registration.cgroups == f"no cgroup v2: {not_cgroup2} is not on a cgroup v2 file system"
    assert not not_cgroup2.exists()
    assert agent.stderr is not None
    assert f"task isolation: no cgroup v2: {not_cgroup2}" in agent.stderr.read().decode()


def test_a_development_mode_agent_says_so(controller, tmp_path):
    registration, agent = registration_of(controller, tmp_path, "--tasks-as-agent-user", "--no-cgroups")
    assert not registration.run_as_user and registration.agent_user == "root"
    assert registration.cgroups == "cgroups off (--no-cgroups)"
    assert agent.stderr is not None
    assert "development mode: every task runs as root, the agent's user" in agent.stderr.read().decode()


# -- steps

def run_step(launch, spool: Path, agent_env, confinement: Confinement):
    runner = StepRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive():
        return [event async for event in runner.run()]

    [finished] = asyncio.run(drive())
    return finished


def test_a_step_runs_as_its_user_and_writes_only_where_the_user_may(users, shared_dir, make_step, agent_env):
    alice = users()
    workdir = workdir_of(alice, shared_dir)
    ran = run_step(make_step(user=alice.pw_name, workdir=str(workdir), argv=["id", "-un"], output="step.out"),
                   shared_dir / "spool", agent_env, AS_USER)
    assert ran.error is None and (workdir / "step.out").read_text() == f"{alice.pw_name}\n"
    assert (workdir / "step.out").stat().st_uid == alice.pw_uid
    refused = run_step(make_step(user=alice.pw_name, workdir=str(workdir), argv=["true"], output="/etc/x-%j.out"),
                       shared_dir / "spool", agent_env, AS_USER)
    assert refused.error == f"cannot open output file /etc/x-7.out as user {alice.pw_name}: Permission denied"
    assert not Path("/etc/x-7.out").exists()


def test_a_steps_escaped_process_dies_with_the_step(cgroup_tree, shared_dir, make_step, agent_env):
    escape = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > step-escaped.pid"
    finished = run_step(make_step(user="root", workdir=str(shared_dir), argv=["sh", "-c", escape]),
                        shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.error is None and not finished.oom_killed
    escaped = int((shared_dir / "step-escaped.pid").read_text())
    deadline = time.monotonic() + 2
    while alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(escaped), "the setsid child outlived its step"
    assert not (cgroup_tree.root / "job_7").exists()
