"""The agent that runs a task is the last line (docs/security.md, "Who may vouch for whom"): the job's
user name and uid must agree with this node's user database, and a job as root runs only with
--allow-root-jobs; otherwise nothing starts and the job's error says why. Real processes, real Unix users
made by useradd (names with `ident`, removed afterwards)."""
from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.agent.tasks import Confinement
from corral.protocol import NodeFinished

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="needs root and useradd")

AS_USER = Confinement(run_as_user=True)
AS_USER_WITH_ROOT = Confinement(run_as_user=True, allow_root_jobs=True)


@pytest.fixture(scope="module")
def two_users() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd]]:
    tag, made = secrets.token_hex(3), []
    try:
        for role in ("a", "b"):
            name = f"ident{role}{tag}"
            subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
            made.append(pwd.getpwnam(name))
        yield made[0], made[1]
    finally:
        for entry in made:
            subprocess.run(["userdel", entry.pw_name], check=False)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """Writable by everyone (pytest's tmp_path is under a 0700 directory of root's)."""
    path = Path(tempfile.mkdtemp(prefix="corral-ident-"))
    path.chmod(0o1777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_job(launch, spool: Path, agent_env, confinement: Confinement) -> list:
    runner = JobRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive():
        return [event async for event in runner.run()]

    return asyncio.run(drive())


def run_step(launch, spool: Path, agent_env, confinement: Confinement):
    runner = StepRunner(launch, node_name="node1", spool_dir=spool, base_env=agent_env, confinement=confinement)

    async def drive():
        return [event async for event in runner.run()]

    [finished] = asyncio.run(drive())
    return finished


def mismatch(name: str, node_uid: int, job_uid: int) -> str:
    return (f"user '{name}' has uid {node_uid} on node1, but the job is recorded with uid {job_uid}: it runs as "
            "nobody (the controller's record and this node's user database must agree)")


def test_a_job_whose_uid_disagrees_with_the_node_runs_as_nobody(two_users, shared_dir, make_launch, agent_env):
    """The probe's attack (c): a name vouched for with another user's uid."""
    alice, bob = two_users
    marker = shared_dir / "ran"
    launch = make_launch(user=alice.pw_name, uid=bob.pw_uid, workdir=str(shared_dir), argv=["touch", str(marker)])
    [finished] = run_job(launch, shared_dir / "spool", agent_env, AS_USER)
    assert isinstance(finished, NodeFinished)
    assert finished.error == mismatch(alice.pw_name, alice.pw_uid, bob.pw_uid)
    assert [t.exit_code for t in finished.tasks] == [1]
    assert not marker.exists() and not (shared_dir / "slurm-7.out").exists()


def test_roots_name_with_a_made_up_uid_runs_as_nobody_even_where_root_jobs_may(shared_dir, make_launch, agent_env):
    marker = shared_dir / "ran"
    launch = make_launch(user="root", uid=4242, workdir=str(shared_dir), argv=["touch", str(marker)])
    [finished] = run_job(launch, shared_dir / "spool", agent_env, AS_USER_WITH_ROOT)
    assert finished.error == mismatch("root", 0, 4242)
    assert not marker.exists()


def test_a_root_job_runs_only_where_the_agent_allows_root_jobs(shared_dir, make_launch, agent_env):
    """The probe's attack (d), the agent's own line: the controller takes a job as root only from root on
    its host; this node runs it only with --allow-root-jobs."""
    marker = shared_dir / "ran"
    launch = make_launch(user="root", uid=0, workdir=str(shared_dir), argv=["touch", str(marker)])
    [finished] = run_job(launch, shared_dir / "spool", agent_env, AS_USER)
    assert finished.error == ("a job as root (user 'root', uid 0) is refused on node1: its agent runs root jobs "
                              "only with --allow-root-jobs")
    assert not marker.exists()
    allowed = make_launch(user="root", uid=0, workdir=str(shared_dir), argv=["sh", "-c", f"id -u > {marker}"])
    _, finished = run_job(allowed, shared_dir / "spool", agent_env, AS_USER_WITH_ROOT)
    assert finished.error is None and marker.read_text() == "0\n"


def test_a_step_whose_uid_disagrees_with_the_node_runs_as_nobody(two_users, shared_dir, make_step, agent_env):
    alice, bob = two_users
    marker = shared_dir / "ran"
    step = make_step(user=bob.pw_name, uid=alice.pw_uid, workdir=str(shared_dir), argv=["touch", str(marker)],
                     output="step.out")
    finished = run_step(step, shared_dir / "spool", agent_env, AS_USER)
    assert finished.error == mismatch(bob.pw_name, bob.pw_uid, alice.pw_uid)
    assert not marker.exists() and not (shared_dir / "step.out").exists()
    as_root = run_step(make_step(user="root", uid=0, workdir=str(shared_dir), argv=["touch", str(marker)]),
                       shared_dir / "spool", agent_env, AS_USER)
    assert as_root.error is not None and "refused on node1" in as_root.error and not marker.exists()


def test_a_job_whose_name_and_uid_agree_runs_as_that_user(two_users, shared_dir, make_launch, agent_env):
    alice, _ = two_users
    launch = make_launch(user=alice.pw_name, uid=alice.pw_uid, workdir=str(shared_dir), argv=["id", "-u"])
    _, finished = run_job(launch, shared_dir / "spool", agent_env, AS_USER)
    assert finished.error is None
    assert (shared_dir / "slurm-7.out").read_text() == f"{alice.pw_uid}\n"
