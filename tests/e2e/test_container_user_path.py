"""The whole container path as a plain user (issue 25): a user made with useradd runs `sbatch
--container-image=IMAGE script.sh` with corral's own sbatch, and the script's `srun` (run on the job's first
node, as the user) starts a step on both nodes, each task in the image, as the user, writing through a mount.

The user needs an installation of corral it can run: this checkout's virtual environment is not one where
its interpreter lives under /root (mode 0700), so the test takes one made by an ordinary install where
every user can read it, named by CORRAL_USER_INSTALL (a virtual environment's directory), e.g.
    /usr/bin/python3 -m venv /opt/corral && /opt/corral/bin/pip install -c requirements.lock .
and is skipped, saying so, without one. The controller and agents are this checkout's, run as root."""
from __future__ import annotations

import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from corral.agent.container_images import node_architecture
from corral.cli.shared_install import unreachable_install
from tests.agent.container_image import BUSYBOX, build_image
from tests.e2e import test_containers
from tests.e2e.test_containers import start, users_dir

gpu_device_dir = test_containers.gpu_device_dir  # a fixture

INSTALL = Path(os.environ.get("CORRAL_USER_INSTALL", "/nonexistent"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or BUSYBOX is None
                       or not all(shutil.which(t) for t in ("runc", "unshare", "newuidmap", "useradd", "runuser")),
                       reason="needs root, runc, uidmap, busybox-static, useradd and runuser"),
    pytest.mark.skipif(not (INSTALL / "bin" / "sbatch").exists(),
                       reason="no installation of corral every user can run: make one (see the module's "
                       "docstring) and name it in CORRAL_USER_INSTALL"),
]


@pytest.fixture
def shared_root():
    root = Path(tempfile.mkdtemp(prefix="corral-e2e-ctrfix-user-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def user():
    name = f"ctrfix{secrets.token_hex(3)}"
    sub = 700_000 + secrets.randbelow(100_000)
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", f"{sub}-{sub}", "--add-subgids", f"{sub}-{sub}", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", name], check=False)


SCRIPT = """#!/bin/sh
#SBATCH --nodes=2 --ntasks-per-node=1
srun sh -c 'id -u > /work/uid.$SLURM_PROCID; cat /etc/image-release > /work/image.$SLURM_PROCID'
"""


def test_a_plain_user_runs_sbatch_with_an_image_whose_script_runs_srun_in_it(shared_root, user, gpu_device_dir):
    packages = sorted(INSTALL.glob("lib/python3*/site-packages/corral"))
    assert packages, f"{INSTALL} has no corral package: install it (pip install ., not -e)"
    problem = unreachable_install(str(INSTALL / "bin"), str(packages[0]))
    assert problem is None, f"CORRAL_USER_INSTALL is not an install every user can run: {problem}"
    image = build_image(shared_root / "image.tar", node_architecture())
    cluster = start(shared_root, gpu_device_dir)
    try:
        work = users_dir(shared_root, user)
        reply = cluster.http.post("/api/v1/tokens", json={"user": user.pw_name, "description": "ctrfix e2e"})
        assert reply.status_code == 201, reply.text
        (work / "job.sh").write_text(SCRIPT)
        os.chown(work / "job.sh", user.pw_uid, user.pw_gid)
        env = {"PATH": f"{INSTALL / 'bin'}:/usr/bin:/bin", "CORRAL_URL": cluster.url,
               "CORRAL_TOKEN": reply.json()["token"], "HOME": str(work), "LANG": "C.UTF-8"}
        submitted = subprocess.run(
            ["runuser", "-u", user.pw_name, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
             "sbatch", "--parsable", f"--container-image={image}", f"--container-mounts={work}:/work", "job.sh"],
            cwd=work, capture_output=True, text=True, timeout=120, check=False)
        assert submitted.returncode == 0 and submitted.stderr == "", submitted
        job_id = int(submitted.stdout)
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", timeout_s=120)
        out = (work / f"slurm-{job_id}.out").read_text() if (work / f"slurm-{job_id}.out").exists() else ""
        assert job["state"] == "COMPLETED", (job, out, cluster.logs())
        assert job["user"] == user.pw_name
        for rank in (0, 1):
            assert (work / f"uid.{rank}").read_text() == f"{user.pw_uid}\n", out
            assert (work / f"uid.{rank}").stat().st_uid == user.pw_uid
            assert (work / f"image.{rank}").read_text() == "corral-test-image\n"  # in the image, not on the host
        step = cluster.http.get(f"/api/v1/jobs/{job_id}/steps/0").json()
        assert step["state"] == "COMPLETED", step
    finally:
        cluster.stop()
