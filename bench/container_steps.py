"""A step's latency through corral, plain against in a container (issue 25's closing figure, decision 0020):
a real controller and one root agent (tests/e2e/harness.py, cgroups off), a user made with useradd, one
allocation; `true` as a step, alternately on the node and in the busybox test image, N times each. The
latency is the step's record: from the controller taking the request to the agent's report of its end
(dispatch, the leader, the runtime, the exit, the report). Needs root, runc, uidmap and busybox-static.
Run: .venv/bin/python bench/container_steps.py [--steps 30]"""
from __future__ import annotations

import argparse
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

from corral.agent.container_images import node_architecture

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.agent.container_image import build_image  # noqa: E402
from tests.e2e.harness import Cluster  # noqa: E402


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def step_ms(cluster: Cluster, job_id: int, workdir: Path, container: dict) -> float:
    body = {"argv": ["true"], "workdir": str(workdir), "env": {"PATH": "/usr/bin:/bin"}, "output": "/dev/null",
            **container}
    reply = cluster.http.post(f"/api/v1/jobs/{job_id}/steps", json=body)
    reply.raise_for_status()
    step_id = reply.json()["step_id"]
    while True:
        step = cluster.http.get(f"/api/v1/jobs/{job_id}/steps/{step_id}", params={"wait_s": 30}).json()
        if step["end_time"] is not None:
            break
    if step["state"] != "COMPLETED":
        raise SystemExit(f"step {step_id} {step['state']}: {step.get('error')}")
    return (step["end_time"] - step["start_time"]) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="corral-bench-ctrsteps-"))
    root.chmod(0o755)
    name = f"ctrbench{secrets.token_hex(3)}"
    sub = 500_000 + secrets.randbelow(100_000)
    subprocess.run(["useradd", "-M", "-d", f"/nonexistent-{name}", "-s", "/bin/sh", name], check=True)
    subprocess.run(["usermod", "--add-subuids", f"{sub}-{sub}", "--add-subgids", f"{sub}-{sub}", name], check=True)
    cluster = None
    try:
        user = pwd.getpwnam(name)
        devices = root / "dev"
        devices.mkdir()
        os.mknod(devices / "nvidia0", 0o666 | stat.S_IFCHR, os.makedev(195, 0))
        image = build_image(root / "image.tar", node_architecture())
        work = root / "work"
        work.mkdir()
        os.chown(work, user.pw_uid, user.pw_gid)
        cluster = Cluster(root, nodes=1, gpus=1, agent_args=("--no-cgroups", "--gpu-device-dir", str(devices)))
        cluster.start()
        job_id = cluster.submit(allocation=True, user=name, uid=user.pw_uid, workdir=str(work), gpus_per_node=1,
                                container_image=str(image), env={"PATH": "/usr/bin:/bin"})
        cluster.wait_state(job_id, "RUNNING")
        # The job has an image: a step in it by default. A plain step: a job without one, in its own allocation.
        plain_id = cluster.submit(allocation=True, user=name, uid=user.pw_uid, workdir=str(work),
                                  env={"PATH": "/usr/bin:/bin"})
        cluster.wait_state(plain_id, "RUNNING")
        step_ms(cluster, job_id, work, {})  # the image's import, once
        plain, contained = [], []
        started = time.monotonic()
        for _ in range(args.steps):
            plain.append(step_ms(cluster, plain_id, work, {}))
            contained.append(step_ms(cluster, job_id, work, {}))
        took = time.monotonic() - started
        for label, values in (("plain step", plain), ("container step", contained)):
            print(f"{label}: p50 {percentile(values, 0.5):.1f} ms, p99 {percentile(values, 0.99):.1f} ms "
                  f"({len(values)} steps of true, requested to reported)")
        print(f"{2 * args.steps} steps in {took:.1f} s; load average {os.getloadavg()[0]:.1f}")
    finally:
        if cluster is not None:
            cluster.stop()
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
