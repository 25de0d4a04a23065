"""A corral cluster spread over virtual hosts (tests/multihost/netns.py): the controller on `head`, one
agent on each compute host (its node name is its host name), and the commands run from `login`, all
naming each other by host name, as on a real cluster. The working directory is shared by every host
(the namespaces share this machine's file system): the shared file system a real cluster mounts.

It is tests/e2e/harness.Cluster with the processes started on their hosts; the API helpers (submit,
job, wait_state, nodes, logs, stop) are Cluster's, over HTTP from the test process to the controller's
address on the virtual network."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.e2e.harness import Cluster, wait_for
from tests.multihost.netns import VirtualNetwork

CONTROLLER_PORT = 6817  # each host has its own network namespace: slurmctld's port is free on `head`
BIN = Path(sys.executable).parent


class SharedSecret:
    """Today's credentials, the only place this harness handles them: one cluster secret in a file that
    the controller, every agent and every client reads. Per-user and per-agent credentials replace
    this class alone."""

    def __init__(self, root: Path) -> None:
        self.file = root / "secret"
        self.value = os.urandom(16).hex()
        self.file.write_text(self.value)
        self.file.chmod(0o600)

    def controller_args(self) -> list[str]:
        return ["--secret-file", str(self.file)]

    def agent_args(self, node: str) -> list[str]:
        return ["--secret-file", str(self.file)]

    def client_env(self) -> dict[str, str]:
        return {"CORRAL_SECRET_FILE": str(self.file)}

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


class MultiHostCluster(Cluster):
    CONTROLLER_HOST = "head"
    CLIENT_HOST = "login"

    def __init__(self, root: Path, net: VirtualNetwork, nodes: list[str], gpus: int = 4) -> None:
        super().__init__(root, nodes=len(nodes), gpus=gpus)
        self.http.close()  # Cluster's, for a loopback controller
        self.net = net
        self.node_names = list(nodes)
        self.credentials = SharedSecret(root)
        self.port = CONTROLLER_PORT
        self.url = f"http://{net.hosts[self.CONTROLLER_HOST].address}:{self.port}"  # from the test process
        self.host_url = f"http://{self.CONTROLLER_HOST}:{self.port}"  # from the hosts, by name
        self.http = httpx.Client(base_url=self.url, headers=self.credentials.http_headers(), timeout=30)
        # The hosts are namespaces of one kernel, whose cgroups they share with every other test's clusters.
        self.cluster_id = os.urandom(4).hex()

    def _spawn_on(self, host: str, args: list[str], log: str) -> subprocess.Popen:
        out = open(self.root / log, "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(self.net.hosts[host].command([sys.executable, *args]), stdout=out,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def start_controller(self, timeout_s: float = 20.0) -> None:
        head = self.net.hosts[self.CONTROLLER_HOST]
        self.controller = self._spawn_on(head.name, [
            "-m", "corral.controller", "--listen", f"{head.address}:{self.port}", "--db", self.db,
            *self.credentials.controller_args(), "--config", str(self.config_file)], "controller.log")
        wait_for(self._healthy, timeout_s, message="controller health")

    def start_agent(self, name: str) -> None:
        """The agent is told the controller's name only: the address it advertises (MASTER_ADDR, srun's
        peers) is its own choice, as on a real host."""
        self.agents[name] = self._spawn_on(name, [
            "-m", "corral.agent", "--controller", self.host_url, *self.credentials.agent_args(name),
            "--node", name, "--gpus", str(self.gpus), "--cpus", "16", "--mem-mib", "64000",
            # The tests submit as root (with the secret), as `corral up`'s own agents allow.
            "--kill-tasks-on-exit", "--allow-root-jobs", "--spool", str(self.root / "spool" / name),
            "--cluster-id", self.cluster_id],
            f"agent-{name}.log")

    def client(self, command: str, *args: str, cwd: Path | None = None, stdin: str | None = None,
               timeout_s: float = 120) -> subprocess.CompletedProcess:
        """A Slurm or corral command run by a user on the login host."""
        env = {**os.environ, "CORRAL_URL": self.host_url, **self.credentials.client_env()}
        return subprocess.run(self.net.hosts[self.CLIENT_HOST].command([str(BIN / command), *args]),
                              env=env, cwd=cwd or self.root, input=stdin, capture_output=True, text=True,
                              timeout=timeout_s)

    def sbatch(self, script: str) -> int:
        path = self.root / f"job-{os.urandom(3).hex()}.sh"
        path.write_text(script)
        done = self.client("sbatch", "--parsable", str(path))
        assert done.returncode == 0, f"{done.stdout}{done.stderr}\n{self.logs()}"
        return int(done.stdout.strip().split(";")[0])
