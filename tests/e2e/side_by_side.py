"""Several real `corral up` clusters on this host at once (issue 21, item 2): root's, and a Unix user's.

Every cluster names its nodes node1 and node2, and its jobs are numbered from 1, so they collide in
everything a cluster could make on the host but its own id. A user's cluster runs under `setpriv` as that
user, keeping only CAP_DAC_READ_SEARCH: it may read the test's interpreter (under /root here) and nothing
more, so the cgroups stay root's as for any user."""
from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from tests.e2e.harness import API

MARKER = "CORRAL_SIDE_BY_SIDE"
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}


class UpCluster:
    """`corral up` (2 nodes x 2 simulated GPUs) in a process of its own, as root or as `user`."""

    def __init__(self, root: Path, port: int, env: dict[str, str], user: pwd.struct_passwd | None = None) -> None:
        self.root, self.port, self.user = root, port, user
        self.state_dir = root / "state"
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.proc: subprocess.Popen | None = None
        self.http: httpx.Client | None = None
        self.banner = ""

    @property
    def job_user(self) -> str:
        return self.user.pw_name if self.user else pwd.getpwuid(os.geteuid()).pw_name

    @property
    def cluster_id(self) -> str:
        return (self.state_dir / "cluster-id").read_text().strip()

    def start(self, cgroup: Path | None = None) -> UpCluster:
        """`cgroup`: a cgroup v2 directory `corral up` starts in (as `systemd-run --scope` would put it)."""
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "corral.toml"
        config.write_text("kill_grace_s = 2\n")
        argv = [sys.executable, "-m", "corral.cli.main", "up", "--nodes", "2", "--gpus-per-node", "2",
                "--port", str(self.port), "--state-dir", str(self.state_dir), "--config", str(config)]
        if self.user is not None:
            for path in (self.root, *self.root.rglob("*")):
                os.chown(path, self.user.pw_uid, self.user.pw_gid)
            argv = ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--init-groups",
                    "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *argv]
        if cgroup is not None:
            argv = ["sh", "-c", f'echo $$ > {cgroup}/cgroup.procs && exec "$@"', "sh", *argv]
        self.proc = subprocess.Popen(argv, env=self.env, cwd=self.root, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        lines = []
        for line in self.proc.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        self.banner = "".join(lines)
        if "is up" not in self.banner:  # it stopped (stdout closed): say what it said on stderr too
            self.ensure_stopped()
            raise AssertionError(f"corral up is not up (exit status {self.proc.returncode}); it printed "
                                 f"{self.banner!r} and on stderr {self.proc.stderr.read()!r}\n{self.logs()}")
        secret = (self.state_dir / "secret").read_text().strip()
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}{API}", trust_env=False,
                                 headers={"Authorization": f"Bearer {secret}"}, timeout=60)
        return self

    def submit(self, argv: list[str], marker: str, **fields) -> int:
        assert self.http is not None
        body = {"workdir": str(self.root), "user": self.job_user, "argv": argv,
                "env": {"PATH": os.environ["PATH"], MARKER: marker}, "gpus_per_node": 1, **fields}
        reply = self.http.post("/jobs", json=body)
        assert reply.status_code == 201, reply.text
        return reply.json()["job_id"]

    def job(self, job_id: int) -> dict:
        assert self.http is not None
        return self.http.get(f"/jobs/{job_id}").json()

    def jobs(self) -> list[dict]:
        """Every job, finished ones too, through the pages of the list."""
        assert self.http is not None
        found: list[dict] = []
        after = 0
        while True:
            reply = self.http.get("/jobs", params={"all": "true", "limit": 500, "after": after})
            found += reply.json()
            if not reply.headers.get("X-Next-After"):
                return found
            after = int(reply.headers["X-Next-After"])

    def nodes(self) -> list[dict]:
        assert self.http is not None
        return self.http.get("/nodes").json()

    def stop(self) -> tuple[int, str]:
        """SIGTERM `corral up`; its exit status and what it printed on stderr."""
        assert self.proc is not None
        if self.http is not None:
            self.http.close()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=120)
        return code, self.proc.stderr.read() if self.proc.stderr else ""

    def ensure_stopped(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        logs = sorted((self.state_dir / "logs").glob("*.log"))
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)


def marked_jobs(marker: str) -> dict[int, int]:
    """job id -> live (not zombie) processes carrying `marker`."""
    found: dict[int, int] = {}
    for proc in psutil.process_iter():
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get(MARKER) == marker and "SLURM_JOB_ID" in env:
            found[int(env["SLURM_JOB_ID"])] = found.get(int(env["SLURM_JOB_ID"]), 0) + 1
    return found


def kill_marked(marker: str) -> None:
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(MARKER) == marker:
                proc.kill()
        except psutil.Error:
            pass


@contextmanager
def clusters_user() -> Iterator[pwd.struct_passwd]:
    """A Unix user of the test's own (its name says whose), removed afterwards."""
    name = f"clusters{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell", "/bin/sh", name], check=True)
    user = pwd.getpwnam(name)
    try:
        yield user
    finally:
        end_processes_of(user.pw_uid)
        subprocess.run(["userdel", name], check=False)


def end_processes_of(uid: int, timeout_s: float = 10.0) -> None:
    """SIGKILL whatever still runs as `uid` (a cluster killed outright leaves its children a moment)."""
    left = [p for p in psutil.process_iter() if _uid(p) == uid]
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(left, timeout=timeout_s)


def _uid(proc: psutil.Process) -> int | None:
    try:
        return proc.uids().real
    except psutil.Error:
        return None


def forget(cluster: UpCluster) -> None:
    """Remove what the stopped cluster leaves on the host: root's spools, and whatever a failed run left of
    its cgroup trees, its copy of the host's cluster.json."""
    if not (cluster.state_dir / "cluster-id").exists():
        return
    remove_cgroup_trees(cluster.cluster_id)
    if cluster.user is None:
        shutil.rmtree(f"/var/spool/corral/cluster-{cluster.cluster_id}", ignore_errors=True)
        own_copy = Path(f"/run/corral/{cluster.port}")
        for path in (own_copy / "cluster.json", own_copy):
            with contextlib.suppress(OSError):
                path.unlink() if path.is_file() else path.rmdir()


def remove_cgroup_trees(cluster_id: str) -> None:
    """What a failed run left of the cluster's cgroup trees, in every hierarchy (empty ones only)."""
    for tree in Path("/sys/fs/cgroup").glob(f"**/corral-{cluster_id}-node*"):
        for path in sorted((p for p in tree.glob("**") if p.is_dir()), reverse=True):
            try:
                path.rmdir()
            except OSError:
                pass


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def delegated_cgroup(user: pwd.struct_passwd) -> Iterator[Path]:
    """A cgroup v2 directory delegated to `user` as systemd's Delegate=yes does (the user owns it and its
    cgroup.procs, cgroup.threads, cgroup.subtree_control), removed afterwards with what was made in it."""
    from corral.agent.cgroups import default_root

    mount = default_root("x")
    if mount is None:
        raise OSError("no cgroup v2 mount here")
    path = mount.parent / f"clusters-delegated-{secrets.token_hex(3)}"
    path.mkdir()
    try:
        for owned in (path, path / "cgroup.procs", path / "cgroup.threads", path / "cgroup.subtree_control"):
            os.chown(owned, user.pw_uid, user.pw_gid)
        yield path
    finally:
        end_processes_of(user.pw_uid)
        for child in sorted((p for p in path.glob("**") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
