"""`corral up` as root serves every user of the host: the system-wide cluster.json and the auth socket
let a fresh Unix user run sbatch with no set-up of their own, and root its jobs as root; each agent has
its own 0600 credential; both files go when the cluster stops."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import tempfile
from pathlib import Path

import pytest

from tests.controller.test_identity import Cluster as UserCluster
from tests.controller.test_identity import UnixUser, slurm_command, unix_users
from tests.e2e.harness import free_port, wait_for
from tests.e2e.test_stop import CorralUp

pytestmark = [pytest.mark.slow, pytest.mark.skipif(__import__("os").geteuid() != 0, reason="needs root")]


def test_a_fresh_user_submits_through_the_system_file_and_the_socket():
    root = Path(tempfile.mkdtemp(prefix="corral-up-identity-"))
    root.chmod(0o755)
    port = free_port()
    up = CorralUp(root, port)
    try:
        with unix_users("alice") as users:
            up.start()
            system_file = root / "etc" / "cluster.json"
            described = json.loads(system_file.read_text())
            socket_path = Path(f"/run/corral/{port}/auth.sock")
            assert described == {"url": f"http://127.0.0.1:{port}", "auth_socket": str(socket_path),
                                 "cluster_id": (up.state_dir / "cluster-id").read_text().strip()}
            assert stat.S_IMODE(system_file.stat().st_mode) == 0o644
            credentials = [up.state_dir / "agents" / f"node{i}.credential" for i in (1, 2)]
            assert [stat.S_IMODE(p.stat().st_mode) for p in credentials] == [0o600, 0o600]
            assert len({p.read_text() for p in credentials} | {(up.state_dir / "secret").read_text()}) == 3

            alice = users["alice"]
            work = root / "alice"  # where alice may write: the job runs as her
            work.mkdir()
            os.chown(work, alice.uid, alice.gid)
            as_alice = UserCluster(described["url"], root, socket_path, system_file, users)
            code, out, err = slurm_command(as_alice, alice, "sbatch",
                                           ["--parsable", "-D", str(work), "--wrap", "id -un"])
            assert code == 0, err
            job_id = int(out)
            wait_for(lambda: up.job(job_id)["state"] not in ("PENDING", "RUNNING", "COMPLETING"), timeout_s=60,
                     message="alice's job ends")
            assert up.job(job_id)["state"] == "COMPLETED", up.job(job_id)["reason"]
            assert (up.job(job_id)["user"], up.job(job_id)["uid"]) == (alice.name, alice.uid)
            output = work / f"slurm-{job_id}.out"
            assert output.read_text() == f"{alice.name}\n", "the job ran as alice"
            assert output.stat().st_uid == alice.uid, "its output file is alice's"
            code, _, err = slurm_command(as_alice, alice, "scontrol", ["update", "NodeName=node1", "State=DRAIN",
                                                                       "Reason=mine"])
            assert (code, err) == (1, "slurm_update error: Invalid user id\n")

            # root on the controller's host submits as root, as the README does: corral up's agents allow
            # root jobs (--allow-root-jobs), and the controller takes them from root's own socket credential.
            code, out, err = slurm_command(as_alice, UnixUser("root", 0, 0), "sbatch",
                                           ["--parsable", "-D", str(root), "--wrap", "id -u"])
            assert code == 0, err
            root_job = int(out)
            wait_for(lambda: up.job(root_job)["state"] not in ("PENDING", "RUNNING", "COMPLETING"), timeout_s=60,
                     message="root's job ends")
            assert up.job(root_job)["state"] == "COMPLETED", up.job(root_job)["reason"]
            assert (root / f"slurm-{root_job}.out").read_text() == "0\n"

            code, _ = up.stop(signal.SIGTERM)
            assert code == 0
            assert not system_file.exists() and not socket_path.exists()
    finally:
        up.ensure_stopped()
        shutil.rmtree(root, ignore_errors=True)
