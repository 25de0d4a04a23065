"""Containers end to end (issue 25, decision 0020): a real controller and two root agents with runc run a
2-node batch job's srun steps in an image built here (tests/agent/container_image.py), as a user made
with useradd, with only the job's fake GPU device files; a named container keeps a file between two steps;
a node without the runtime never gets a job with an image; errors say what to do."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path

import pytest

from corral.agent.container_images import node_architecture
from tests.agent.container_image import BUSYBOX, build_image, entry
from tests.e2e.harness import Cluster, wait_for
from tests.e2e.test_confinement import cgroup_root  # noqa: F401 - a fixture
from tests.slurm.commands import Commands

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or BUSYBOX is None
                       or not all(shutil.which(t) for t in ("runc", "unshare", "newuidmap", "useradd")),
                       reason="needs root, runc, uidmap, busybox-static and useradd"),
]
PATH = {"PATH": os.environ["PATH"]}
ROOT_AGENT = ("--no-cgroups", "--gpu-device-dir")


@pytest.fixture
def shared_root():
    """The cluster's files, where every user may pass (the agents' spools hold the containers' bundles)."""
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-ctrwire-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def user():
    """A user with one subordinate uid and gid, which a container needs to run as the user."""
    name = f"ctrwire{secrets.token_hex(3)}"
    sub = 500_000 + secrets.randbelow(100_000)
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", f"{sub}-{sub}", "--add-subgids", f"{sub}-{sub}", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


@pytest.fixture
def gpu_device_dir(shared_root):
    """Device files for two simulated GPUs per node (mknod, NVIDIA's major 195), as the confinement tests make."""
    directory = shared_root / "dev"
    directory.mkdir()
    for index in (0, 1):
        os.mknod(directory / f"nvidia{index}", 0o666 | stat.S_IFCHR, os.makedev(195, index))
    return directory


def start(root: Path, device_dir: Path, without_runtime: tuple[str, ...] = (), *more: str) -> Cluster:
    """Two root agents with 2 GPUs each; nodes in `without_runtime` run with --no-containers."""
    cluster = Cluster(root, nodes=2, gpus=2, agent_args=(*ROOT_AGENT, str(device_dir)))
    cluster.start_controller()
    for name in cluster.node_names:
        cluster.agent_args = (*ROOT_AGENT, str(device_dir), *more,
                              *(("--no-containers",) if name in without_runtime else ()))
        cluster.start_agent(name)
    wait_for(lambda: {n["name"] for n in cluster.nodes() if n["state"] != "down"} >= set(cluster.node_names),
             message="agents registered")
    return cluster


def processes_of(uid: int) -> list[int]:
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uids = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(uids.split()[1]) == uid:
            found.append(int(status.parent.name))
    return found


def users_dir(root: Path, user: pwd.struct_passwd) -> Path:
    path = root / user.pw_name
    path.mkdir(mode=0o700)
    os.chown(path, user.pw_uid, user.pw_gid)
    return path


TASK = ("id -u > /work/uid.$SLURM_PROCID; ls /dev > /work/dev.$SLURM_PROCID; "
        'echo "$SLURM_JOB_ID $SLURM_NTASKS $CUDA_VISIBLE_DEVICES $(pwd) $(cat /etc/image-release)" '
        "> /work/env.$SLURM_PROCID")


def run_step(cluster: Cluster, job_id: int, work: Path, command: str, **container) -> dict:
    """A step of the allocation, as srun inside it would start one (its output to files, not to an srun)."""
    body = {"argv": ["sh", "-c", command], "workdir": str(work), "env": PATH,
            "output": str(work / "step%s.%t.out"), **container}
    reply = cluster.http.post(f"/api/v1/jobs/{job_id}/steps", json=body)
    assert reply.status_code == 201, reply.text
    step_id = reply.json()["step_id"]
    done = cluster.http.get(f"/api/v1/jobs/{job_id}/steps/{step_id}", params={"wait_s": 60}).json()
    assert done["state"] == "COMPLETED", (done, cluster.logs())
    return done


def test_a_two_node_jobs_tasks_run_in_the_image_as_the_user_with_only_their_gpus(shared_root, user,
                                                                                gpu_device_dir, tmp_path):
    """The tasks of a 2-node job (srun outside an allocation, `corral run`: its tasks are the job's own) run in
    the image; steps of a 2-node allocation (salloc + srun) run in its container, a named one kept between
    two steps. The made user cannot run corral's own srun on this host (its Python lives under /root, mode
    0700), so the steps are started through the API as srun starts them."""
    image = build_image(shared_root / "image.tar", node_architecture())
    cluster = start(shared_root, gpu_device_dir)
    try:
        assert {n["name"]: n["features"] for n in cluster.nodes()} == {"node1": ["runc"], "node2": ["runc"]}
        work = users_dir(shared_root, user)
        common = dict(user=user.pw_name, uid=user.pw_uid, workdir=str(work), env=PATH, nodes=2, ntasks_per_node=1,
                      gpus_per_node=1, container_image=str(image), container_mounts=f"{work}:/work",
                      container_workdir="/work")
        job_id = cluster.submit(argv=["sh", "-c", TASK], **common, output=str(work / "job.out"))
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=90)
        assert job["state"] == "COMPLETED", (job, (work / "job.out").read_text(), cluster.logs())
        assert job["container_image"] == str(image) and job["container_workdir"] == "/work"
        held = {s["node"]: s["gpus"] for s in job["slices"]}
        for rank in (0, 1):
            assert (work / f"uid.{rank}").read_text() == f"{user.pw_uid}\n"
            assert (work / f"uid.{rank}").stat().st_uid == user.pw_uid  # written through the mount, as the user
            devices = [d for d in (work / f"dev.{rank}").read_text().split() if d.startswith("nvidia")]
            assert devices == [f"nvidia{held[f'node{rank + 1}'][0]}"]  # its one GPU's file, not the other's
            assert (work / f"env.{rank}").read_text() == f"{job_id} 2 0 /work corral-test-image\n"
        sacct = Commands(cluster, tmp_path)("sacct", "-j", str(job_id), "-P", "-n", "-o", "JobID,User,State,NNodes")
        assert sacct.stdout.splitlines()[0] == f"{job_id}|{user.pw_name}|COMPLETED|2", sacct

        alloc = cluster.submit(allocation=True, **common)
        cluster.wait_state(alloc, "RUNNING")
        run_step(cluster, alloc, work, "echo kept-$SLURM_PROCID > /etc/state", container_name="env1")
        run_step(cluster, alloc, work, "cat /etc/state > /work/state.$SLURM_PROCID", container_name="env1")
        run_step(cluster, alloc, work, "cat /etc/state > /work/unnamed.$SLURM_PROCID 2>&1; "
                                       "touch /etc/x 2>/dev/null || echo ro > /work/ro.$SLURM_PROCID")
        for rank in (0, 1):
            assert (work / f"state.{rank}").read_text() == f"kept-{rank}\n"  # the named container kept it
            assert "No such file" in (work / f"unnamed.{rank}").read_text()  # the image itself is untouched
            assert (work / f"ro.{rank}").read_text() == "ro\n"
        # srun's own path: the step's output streamed back to srun (run by the test as root, the cluster's
        # operator, in the user's allocation: the tasks still run as the job's user).
        streamed = Commands(cluster, work)("srun", f"--jobid={alloc}", "-l", "sh", "-c",
                                               "cat /etc/image-release; id -u")
        assert streamed.code == 0, (streamed, cluster.logs())
        assert sorted(streamed.stdout.splitlines()) == sorted(
            f"{rank}: {line}" for rank in (0, 1) for line in ("corral-test-image", str(user.pw_uid))), streamed
        assert cluster.http.post(f"/api/v1/jobs/{alloc}/complete", json={}).status_code in (200, 202, 204)
        cluster.wait_state(alloc, "COMPLETED")
        for name in ("node1", "node2"):  # every lease given back: the image stays cached, free to evict
            [entry] = [p for p in (shared_root / "spool" / name / "images").iterdir() if not p.name.startswith(".")]
            assert list((entry / "leases").iterdir()) == []
    finally:
        cluster.stop()


def test_a_job_with_an_image_never_goes_to_a_node_without_the_runtime_and_errors_say_what_to_do(
        shared_root, user, gpu_device_dir, tmp_path):
    image = build_image(shared_root / "image.tar", node_architecture())
    cluster = start(shared_root, gpu_device_dir, without_runtime=("node2",))
    try:
        assert {n["name"]: n["features"] for n in cluster.nodes()} == {"node1": ["runc"], "node2": []}
        work = users_dir(shared_root, user)
        common = dict(user=user.pw_name, uid=user.pw_uid, workdir=str(work), env=PATH, container_image=str(image))
        # Two nodes with the runtime can never be had: refused at submit, as Slurm refuses a constraint.
        reply = cluster.http.post("/api/v1/jobs", json={**common, "argv": ["true"], "nodes": 2})
        assert reply.status_code == 422 and "feature runc" in reply.text and "1 of the partition's 2" in reply.text
        # One node: always node1, even while node1 is busy and node2 idle.
        busy = cluster.submit(argv=["sleep", "30"], **common, gpus_per_node=2, container_mounts=f"{work}:/work")
        assert cluster.wait_state(busy, "RUNNING")["nodelist"] == "node1"
        waiting = cluster.submit(argv=["true"], **common, gpus_per_node=1)
        pending = cluster.wait_state(waiting, "PENDING")
        assert pending["nodelist"] == "" and cluster.job(waiting)["state"] == "PENDING"
        cluster.http.post(f"/api/v1/jobs/{busy}/cancel")
        assert cluster.wait_state(waiting, "COMPLETED", "FAILED", timeout_s=60)["nodelist"] == "node1"

        missing = cluster.submit(argv=["true"], **{**common, "container_image": str(shared_root / "nope.tar")})
        reason = cluster.wait_state(missing, "FAILED", timeout_s=60)["reason"]
        assert reason.startswith(f"LaunchFailed:container: image {shared_root / 'nope.tar'} not found on this node")
        private = shared_root / "private"
        private.mkdir(mode=0o700)
        unreadable = cluster.submit(argv=["true"], **common, container_mounts=f"{private}:/data")
        reason = cluster.wait_state(unreadable, "FAILED", timeout_s=60)["reason"]
        assert f"{private} is not readable by uid {user.pw_uid}" in reason
        other = build_image(shared_root / "other.tar", "arm64" if node_architecture() != "arm64" else "amd64")
        foreign = cluster.submit(argv=["true"], **{**common, "container_image": str(other)})
        reason = cluster.wait_state(foreign, "FAILED", timeout_s=60)["reason"]
        assert "use an image built for" in reason
    finally:
        cluster.stop()


BATCH = """#!/bin/sh
#SBATCH -N 2 --ntasks-per-node=1 --gpus-per-node=1 -o {work}/batch.out
#SBATCH --container-image={image}
#SBATCH --container-mounts={work}:/work --container-remap-root
cat /etc/image-release 2>/dev/null || echo the batch script runs on the node
srun sh -c 'id -u'
"""


def test_sbatch_directives_reach_the_job_and_its_srun_steps_and_root_gets_no_container(shared_root,
                                                                                       gpu_device_dir):
    """sbatch and srun as Slurm users type them (#SBATCH --container-*). Only root can run corral's own srun
    on this host (the made users cannot reach its Python under /root), and root gets no container: the
    batch script runs on the node, its step is refused with what to do, and nothing of runc's is left."""
    image = build_image(shared_root / "image.tar", node_architecture())
    cluster = start(shared_root, gpu_device_dir, (), "--allow-root-jobs")
    try:
        work = shared_root / "work"
        work.mkdir()
        cmd = Commands(cluster, work)
        job_id = cmd.submit(stdin=BATCH.format(work=work, image=image))
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=90)
        out = (work / "batch.out").read_text()
        assert job["state"] == "FAILED", (job, out, cluster.logs())  # the script's last command failed
        assert out.startswith("the batch script runs on the node\n"), out
        assert "a container as root is refused" in out and "submit the job as a user" in out, out
        [step] = job["steps"][1:]
        assert step["state"] == "FAILED", step
        shown = cmd("scontrol", "show", "job", str(job_id)).stdout
        assert (f"   ContainerImage={image} ContainerMounts={work}:/work ContainerWorkdir=(null) ContainerName=(null) "
                f"ContainerEnv=(null) ContainerMountHome=yes ContainerRemapRoot=yes\n") in shown, shown
        assert not list(Path("/sys/fs/cgroup").glob(f"*/corral-job{job_id}.*"))
        refused = cmd("sbatch", "--container-mounts=data:/data", "--wrap", "true")
        assert (refused.code, refused.stderr) == (
            1, "sbatch: error: --container-mounts: 'data:/data': both paths must be absolute\n")
    finally:
        cluster.stop()


def test_a_service_replica_runs_in_its_image_and_answers_through_the_gateway(shared_root, user, gpu_device_dir):
    """A service spec's `image`: its replica is a job with the container fields, runs busybox's httpd in the
    image as the user, passes its readiness probe (an HTTP GET on its port: the container shares the node's
    network) and answers through `corral gateway`."""
    import sys

    import httpx

    from tests.e2e.harness import free_port

    httpd = [entry(f"bin/{applet}", tarfile.SYMTYPE, link="busybox") for applet in ("httpd", "mkdir")]
    image = build_image(shared_root / "web.tar", node_architecture(), [httpd])
    cluster = start(shared_root, gpu_device_dir)
    port = free_port()
    gateway = subprocess.Popen(
        [sys.executable, "-m", "corral.cli.main", "gateway", "--controller", cluster.url, "--port", str(port),
         "--secret-file", str(cluster.secret_file)],
        stdout=open(shared_root / "gateway.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        work = users_dir(shared_root, user)
        serve = ("mkdir -p /tmp/www && id -u > /tmp/www/index.html && "
                 "exec httpd -f -p $PORT -h /tmp/www")
        reply = cluster.http.post("/api/v1/services", json={
            "name": "web", "user": user.pw_name, "command": ["sh", "-c", serve], "workdir": str(work),
            "env": PATH, "public": True, "ports": [{"name": "http"}], "image": str(image),
            "probes": {"readiness": {"http": {"path": "/", "port": "http"}, "period_s": 0.5}}})
        assert reply.status_code == 201, reply.text

        def ready() -> dict | None:
            service = cluster.http.get("/api/v1/services/web").json()
            return service if service["ready_replicas"] == 1 else None

        try:
            service = wait_for(ready, 60, 0.2, "the replica ready")
        except AssertionError:
            outputs = "".join(p.read_text() for p in work.glob("web-*.out"))
            service = cluster.http.get("/api/v1/services/web").json()
            raise AssertionError(f"{service}\n{outputs}\n{cluster.logs()}") from None
        [replica] = service["replicas"]
        assert cluster.job(replica["job_id"])["container_image"] == str(image)
        def answered() -> httpx.Response | None:
            try:
                reply = httpx.get(f"http://127.0.0.1:{port}/s/web/", timeout=5)
            except httpx.TransportError:  # the gateway not listening yet
                return None
            return reply if reply.status_code == 200 else None

        answer = wait_for(answered, 30, 0.2, "an answer through the gateway")
        assert answer.text == f"{user.pw_uid}\n"
        refused = cluster.http.post("/api/v1/services", json={
            "name": "bad", "user": user.pw_name, "command": ["true"], "workdir": str(shared_root),
            "image_mounts": "/data"})
        assert refused.status_code == 422 and "image_mounts" in refused.text and "give image too" in refused.text
        assert cluster.http.delete("/api/v1/services/web").status_code in (200, 204)
        wait_for(lambda: cluster.http.get("/api/v1/services/web").status_code == 404, 60, 0.2, "the service gone")
        cluster.wait_state(replica["job_id"], "COMPLETED", "CANCELLED", "FAILED", timeout_s=60)
        # httpd, the container's PID 1, ignores the SIGTERM runc forwards; runc is SIGKILLed after the grace,
        # and the agent kills what runc left: nothing of the user's runs on.
        wait_for(lambda: not processes_of(user.pw_uid), 10, 0.2, "the replica's processes gone")
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(timeout=10)
        cluster.stop()


def test_a_containerised_job_stays_in_its_cgroup(shared_root, user, gpu_device_dir, cgroup_root):  # noqa: F811
    """runc started by the task's leader as the user, rootless, makes no cgroup of its own: the container's
    processes are in the job's cgroup (v2 tracking and the v1 hierarchies the agent takes), as any task's."""
    image = build_image(shared_root / "image.tar", node_architecture())
    cluster = Cluster(shared_root, nodes=1, gpus=2, agent_args=(
        "--cgroup-root", str(cgroup_root), "--gpu-device-dir", str(gpu_device_dir))).start()
    try:
        [node] = cluster.nodes()
        assert node["cgroups"].startswith("cgroup v2 tracking") and node["features"] == ["runc"], node
        work = users_dir(shared_root, user)
        job_id = cluster.submit(argv=["sh", "-c", "cat /proc/self/cgroup > /work/cgroup"], user=user.pw_name,
                                uid=user.pw_uid, workdir=str(work), env=PATH, gpus_per_node=1, mem_mib=256,
                                container_image=str(image), container_mounts=f"{work}:/work")
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=60)
        assert job["state"] == "COMPLETED", (job, cluster.logs())
        lines = (work / "cgroup").read_text().splitlines()
        v2 = next(line for line in lines if line.startswith("0::"))
        assert v2.endswith(f"/job_{job_id}/batch"), lines
        memory = [line for line in lines if ":memory:" in line]
        assert memory or "memory" not in node["cgroups"], (lines, node["cgroups"])
        assert all(line.endswith(f"/job_{job_id}/batch") for line in memory), lines
        wait_for(lambda: not (cgroup_root / f"job_{job_id}").exists(), 10, message="the job's cgroup removed")
    finally:
        cluster.stop()


TRAIN = """import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
with open(f"/work/torch.{dist.get_rank()}", "w") as out:
    print(dist.get_rank(), dist.get_world_size(), int(total.item()), os.environ["SLURM_NODEID"], file=out)
dist.destroy_process_group()
"""


def test_a_torchrun_job_runs_across_two_nodes_in_containers(shared_root, user, gpu_device_dir):
    """torchrun on two nodes, one container each. The busybox image has no Python: the host's own (Debian's
    python3, /usr) and this checkout's site-packages (torch) are bind-mounted read-only into it, the image
    giving only the mount points and merged-/usr's /lib links. gloo over the node's loopback (the containers
    share the node's network)."""
    import sys

    torch = pytest.importorskip("torch")
    host = subprocess.run(["/usr/bin/python3", "-c", "import sys; print(sys.version_info[:2])"],
                          capture_output=True, text=True, check=False).stdout.strip()
    if host != str(sys.version_info[:2]):
        pytest.skip(f"the host's /usr/bin/python3 is {host or 'missing'}, this checkout's torch is for "
                    f"{sys.version_info[:2]}")
    site = Path(torch.__file__).resolve().parent.parent
    layers = [[entry(d, tarfile.DIRTYPE) for d in ("usr", "site")]
              + [entry(link, tarfile.SYMTYPE, link=f"usr/{link}") for link in ("lib", "lib64")]]
    image = build_image(shared_root / "python.tar", node_architecture(), layers)
    cluster = start(shared_root, gpu_device_dir)
    try:
        work = users_dir(shared_root, user)
        (work / "train.py").write_text(TRAIN)
        run = ("exec python3 -m torch.distributed.run --nnodes=2 --nproc-per-node=1 --node-rank=$SLURM_NODEID "
               "--master-addr=$MASTER_ADDR --master-port=$MASTER_PORT /work/train.py")
        job_id = cluster.submit(argv=["sh", "-c", run], user=user.pw_name, uid=user.pw_uid, workdir=str(work),
                                nodes=2, ntasks_per_node=1, output=str(work / "torch.out"),
                                env={**PATH, "PYTHONPATH": "/site", "GLOO_SOCKET_IFNAME": "lo"},
                                container_image=str(image),
                                container_mounts=f"/usr:/usr:ro,{site}:/site:ro,{work}:/work")
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=240)
        assert job["state"] == "COMPLETED", (job, (work / "torch.out").read_text(), cluster.logs())
        assert sorted((work / f"torch.{rank}").read_text() for rank in (0, 1)) == ["0 2 3 0\n", "1 2 3 1\n"]
    finally:
        cluster.stop()
