"""Tasks run as the job's user (a root agent) and inside per-job cgroups: real users made with useradd,
a real cgroup2 hierarchy mounted by the test."""
from __future__ import annotations

import asyncio
import os
import pwd
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from corral.agent.cgroup_hierarchies import Unified, V1Cpuset, V1Devices, V1Memory, v1_mount, v2_mount_of
from corral.agent.cgroups import CgroupError, CgroupTree, default_pids_max
from corral.agent.cpusets import CpuAllocator, format_cpu_list, parse_cpu_list
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
        launch = make_launch(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir), argv=["id", "-Gn"])
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
        launch = make_launch(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir), argv=["echo", "written"],
                             output=str(target))
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
    launch = make_launch(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir_of(bob, shared_dir)),
                         argv=["true"])
    [finished] = run(launch, shared_dir / "spool", agent_env)
    assert finished.error == f"working directory {shared_dir / bob.pw_name} is not accessible to user {alice.pw_name}"


def test_a_development_mode_agent_runs_tasks_as_itself(shared_dir, make_launch, agent_env):
    launch = make_launch(user="nosuchuser-corral", workdir=str(shared_dir), argv=["id", "-u"])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement())
    assert finished.error is None
    assert (shared_dir / "slurm-7.out").read_text().strip() == str(os.geteuid())


# -- cgroups

@pytest.fixture
def cgroup_tree(gpu_files):
    mount = Path(tempfile.mkdtemp(prefix="corral-cg2-"))
    try:
        subprocess.run(["mount", "-t", "cgroup2", "none", str(mount)], check=True, capture_output=True)
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        mount.rmdir()
        pytest.skip(f"cannot mount a cgroup2 hierarchy here: {exc}")
    # With the agent's default process limit, as agents started on this tree open it (and so its pids
    # hierarchy, a v1 one on a hybrid host, is among those removed afterwards).
    tree = CgroupTree.open(mount / f"corral-test-{secrets.token_hex(3)}", gpu_device_files=gpu_files,
                           pids_max=default_pids_max())
    yield tree
    remove_tree(tree)
    subprocess.run(["umount", str(mount)], check=False)
    mount.rmdir()


@pytest.fixture
def v1_tree(gpu_files):
    """A tree on the host's v1 hierarchies alone: the freezer tracks the jobs (as on a v1-only host)."""
    try:
        tree = CgroupTree.open(None, f"corral-test-{secrets.token_hex(3)}", gpu_files)
    except CgroupError as exc:
        pytest.skip(f"no v1 freezer hierarchy here: {exc}")
    yield tree
    remove_tree(tree)


def remove_tree(tree: CgroupTree) -> None:
    """Remove the cgroups left empty by a test, in every hierarchy (files in them cannot be removed, only
    the directories)."""
    for hierarchy in tree.hierarchies:
        for path in sorted((p for p in hierarchy.root.rglob("*") if p.is_dir()), reverse=True):
            path.rmdir()
        hierarchy.root.rmdir()


@pytest.fixture(scope="module")
def gpu_files():
    """Two GPUs' device files made with mknod (major 195 as NVIDIA's): no driver serves them here, so
    opening one fails with ENXIO, unless the cgroup refuses it first (EPERM)."""
    directory = Path(tempfile.mkdtemp(prefix="corral-dev-"))
    files = {index: directory / f"nvidia{index}" for index in (0, 1)}
    for index, path in files.items():
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, index))
    yield files
    shutil.rmtree(directory)


def in_every_hierarchy(tree: CgroupTree, relative: str) -> list[Path]:
    return [hierarchy.root / relative for hierarchy in tree.hierarchies]


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
    assert not any(path.exists() for path in in_every_hierarchy(cgroup_tree, "job_7"))


def test_a_job_over_its_memory_ends_out_of_memory(cgroup_tree, shared_dir, make_launch, agent_env):
    if "memory" not in cgroup_tree.controllers:
        print(f"skipped: {cgroup_tree.describe()}")
        pytest.skip(f"no memory controller in this cgroup2 hierarchy ({cgroup_tree.describe()})")
    launch = make_launch(user="root", workdir=str(shared_dir), mem_per_node_mib=32,
                         argv=["python3", "-c", "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.oom_killed and finished.tasks[0].signal == 9


def test_on_a_host_without_cgroup_v2_the_v1_freezer_kills_what_escaped(v1_tree, shared_dir, make_launch,
                                                                         agent_env):
    assert v1_tree.describe().startswith("cgroup v1 tracking")
    escape = "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > escaped.pid"
    _, finished = run(make_launch(user="root", workdir=str(shared_dir), argv=["sh", "-c", escape]),
                      shared_dir / "spool", agent_env, Confinement(cgroups=v1_tree))
    assert finished.error is None, finished
    escaped = int((shared_dir / "escaped.pid").read_text())
    deadline = time.monotonic() + 2
    while alive(escaped) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(escaped), "the setsid child outlived its job"
    assert not any(path.exists() for path in in_every_hierarchy(v1_tree, "job_7"))


def test_a_job_over_its_memory_in_a_v1_memory_cgroup_ends_out_of_memory(v1_tree, shared_dir, make_launch,
                                                                         agent_env):
    if not isinstance(v1_tree.memory, V1Memory):
        pytest.skip(f"no v1 memory hierarchy here ({v1_tree.describe()})")
    launch = make_launch(user="root", workdir=str(shared_dir), mem_per_node_mib=32,
                         argv=["python3", "-c", "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=v1_tree))
    assert finished.oom_killed and finished.tasks[0].signal == 9
    small = make_launch(job_id=8, user="root", workdir=str(shared_dir), mem_per_node_mib=32, argv=["true"])
    _, finished = run(small, shared_dir / "spool", agent_env, Confinement(cgroups=v1_tree))
    assert not finished.oom_killed and finished.tasks[0].exit_code == 0


# What a task reports of its CPUs: the ones it may run on, and its cgroup's cpuset (v1's line in
# /proc/self/cgroup names it under the cpuset mount, v2's "0::" line under the cgroup2 mount).
CPUS_OF_TASK = ("grep Cpus_allowed_list /proc/self/status | cut -f2; "
                "cat \"{mount}$(sed -n 's/^[0-9]*:{key}://p' /proc/self/cgroup)/cpuset.cpus\"; sleep {sleep}")


def cpus_command(tree: CgroupTree, sleep: float = 0) -> list[str]:
    if tree.cpuset is None:
        pytest.skip(f"no cpuset controller here ({tree.describe()})")
    if isinstance(tree.cpuset, V1Cpuset):
        mount, key = v1_mount("cpuset"), "cpuset"
    else:
        mount, key = v2_mount_of(tree.cpuset.root), ""
    return ["sh", "-c", CPUS_OF_TASK.format(mount=mount, key=key, sleep=sleep)]


def test_concurrent_jobs_run_on_disjoint_cpus_their_cgroups_hold(cgroup_tree, shared_dir, make_launch, agent_env):
    if len(cgroup_tree.cpus.cpus) < 2:
        pytest.skip("the agent may use a single CPU here: two jobs cannot have disjoint sets")
    argv = cpus_command(cgroup_tree, sleep=0.5)  # both run at once
    launches = [make_launch(job_id=job_id, user="root", workdir=str(shared_dir), cpus_on_node=1, argv=argv)
                for job_id in (7, 8)]

    async def drive(launch):
        runner = JobRunner(launch, node_name="node1", spool_dir=shared_dir / "spool", base_env=agent_env,
                           confinement=Confinement(cgroups=cgroup_tree))
        return [event async for event in runner.run()]

    async def both():
        return await asyncio.gather(*(drive(launch) for launch in launches))

    for _, finished in asyncio.run(both()):
        assert finished.error is None and finished.tasks[0].exit_code == 0, finished
    allowed, cgroup = zip(*((shared_dir / f"slurm-{job_id}.out").read_text().split() for job_id in (7, 8)), strict=True)
    assert allowed == cgroup  # each task runs on exactly its job's cpuset
    assert len(set(allowed)) == 2 and all(len(parse_cpu_list(cpus)) == 1 for cpus in allowed)
    assert cgroup_tree.cpus.take(9, 1) == (cgroup_tree.cpus.cpus[0],)  # both sets were given back


def test_a_job_asking_more_cpus_than_the_agent_has_shares_them_all(cgroup_tree, shared_dir, make_launch,
                                                                   agent_env):
    argv = cpus_command(cgroup_tree)
    launch = make_launch(user="root", workdir=str(shared_dir), cpus_on_node=len(cgroup_tree.cpus.cpus) + 1,
                         argv=argv)
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.error is None, finished
    everything = format_cpu_list(os.sched_getaffinity(0))
    assert (shared_dir / "slurm-7.out").read_text().split() == [everything, everything]


def test_a_restarted_agent_does_not_hand_out_the_cpus_of_job_cgroups_it_finds(cgroup_tree):
    if cgroup_tree.cpuset is None or len(cgroup_tree.cpus.cpus) < 2:
        pytest.skip(f"no cpuset controller or a single CPU here ({cgroup_tree.describe()})")
    leftover = cgroup_tree.for_job(5)
    leftover.leaf("batch", cpus=1)
    try:
        restarted = CgroupTree.open(cgroup_tree.root)
        assert restarted.cpus.take(6, 1) == (cgroup_tree.cpus.cpus[1],)
    finally:
        leftover.remove_if_empty()


@pytest.mark.parametrize("which", ["cgroup_tree", "v1_tree"])  # v2's eBPF filter; v1's devices.deny
def test_a_job_may_open_only_the_device_files_of_its_gpus(which, request, gpu_files, shared_dir, make_launch,
                                                          agent_env):
    cgroup_tree = request.getfixturevalue(which)
    if cgroup_tree.devices is None:
        pytest.skip(f"no devices controller here ({cgroup_tree.describe()})")
    assert isinstance(cgroup_tree.devices, Unified if which == "cgroup_tree" else V1Devices)
    probe = ("import errno, os, sys\n"
             "for path in sys.argv[1:]:\n"
             "    try:\n        os.close(os.open(path, os.O_RDWR))\n    except OSError as exc:\n"
             "        print(os.path.basename(path), errno.errorcode[exc.errno])\n")
    files = gpu_files
    launch = make_launch(user="root", workdir=str(shared_dir), node_gpus=[1],
                         argv=["python3", "-c", probe, str(files[0]), str(files[1])])
    _, finished = run(launch, shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.error is None and finished.tasks[0].exit_code == 0, finished
    # The cgroup refuses GPU 0's file; GPU 1's gets through to the kernel, which has no driver for it.
    assert (shared_dir / "slurm-7.out").read_text().splitlines() == ["nvidia0 EPERM", "nvidia1 ENXIO"]


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
    assert registration.cgroups == f"no cgroups: {not_cgroup2} is not on a cgroup v2 file system"
    assert not not_cgroup2.exists()
    assert agent.stderr is not None
    assert f"task isolation: no cgroups: {not_cgroup2}" in agent.stderr.read().decode()


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
    ran = run_step(make_step(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir), argv=["id", "-un"],
                             output="step.out"),
                   shared_dir / "spool", agent_env, AS_USER)
    assert ran.error is None and (workdir / "step.out").read_text() == f"{alice.pw_name}\n"
    assert (workdir / "step.out").stat().st_uid == alice.pw_uid
    refused = run_step(make_step(user=alice.pw_name, uid=alice.pw_uid, workdir=str(workdir), argv=["true"],
                                 output="/etc/x-%j.out"),
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
    assert not any(path.exists() for path in in_every_hierarchy(cgroup_tree, "job_7"))


def test_a_step_starting_the_jobs_cgroup_on_a_node_gives_it_the_jobs_memory(cgroup_tree, shared_dir, make_step,
                                                                            agent_env):
    if "memory" not in cgroup_tree.controllers:
        pytest.skip(f"no memory controller here ({cgroup_tree.describe()})")
    hog = ["python3", "-c", "x = bytearray(256 << 20); x[::4096] = b'1' * len(x[::4096])"]
    finished = run_step(make_step(user="root", workdir=str(shared_dir), argv=hog, mem_per_node_mib=32,
                                  output="step.out"), shared_dir / "spool", agent_env, Confinement(cgroups=cgroup_tree))
    assert finished.oom_killed and finished.tasks[0].signal == 9


def test_a_gpu_device_file_that_cannot_be_read_leaves_devices_alone_and_says_why(cgroup_tree, shared_dir):
    regular = shared_dir / "nvidia1"
    regular.write_text("")
    for files, why in [({0: shared_dir / "nvidia0"}, f"cannot read the GPU device file {shared_dir}/nvidia0: "
                                                      f"No such file or directory"),
                       ({1: regular}, f"the GPU device file {regular} is not a character device")]:
        tree = CgroupTree.open(cgroup_tree.root, gpu_device_files=files, pids_max=cgroup_tree.pids_max)
        assert tree.devices is None and tree.controllers == cgroup_tree.controllers - {"devices"}
        assert tree.describe().startswith("cgroup v2 tracking")
        assert tree.describe().endswith(f"; no GPU device limit: {why}")


def test_a_job_cgroup_the_kernel_refuses_to_set_up_is_not_left_half_made(cgroup_tree):
    if cgroup_tree.cpuset is None:
        pytest.skip(f"no cpuset controller here ({cgroup_tree.describe()})")
    cgroup_tree.cpus = CpuAllocator([4095])  # a CPU this host does not have: the kernel refuses the cpuset
    job = cgroup_tree.for_job(7)
    for _ in range(2):  # the second time too: what failed was not kept as if set up
        with pytest.raises(CgroupError, match=f"cannot create cgroup {cgroup_tree.cpuset.root}/job_7/batch: "):
            job.leaf("batch", cpus=1)
        assert not (cgroup_tree.cpuset.root / "job_7").exists()
    job.remove_if_empty()
    assert not any(path.exists() for path in in_every_hierarchy(cgroup_tree, "job_7"))


def test_each_job_gets_the_agents_process_limit(cgroup_tree):
    if cgroup_tree.pids is None:
        pytest.skip(f"no pids controller here ({cgroup_tree.describe()})")
    job = cgroup_tree.for_job(41)
    job.leaf("batch")
    try:
        assert (cgroup_tree.pids.root / "job_41" / "pids.max").read_text().strip() == str(cgroup_tree.pids_max)
        assert f"; at most {cgroup_tree.pids_max} processes and threads per job" in cgroup_tree.describe()
    finally:
        job.remove_if_empty()
