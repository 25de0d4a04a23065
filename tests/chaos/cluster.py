"""The fault suite's cluster: controllers, agents and PostgreSQL as real processes on this machine, with
handles to kill, pause and restart each of them, and (with a VirtualNetwork) each on a virtual host of
its own whose network cable can be pulled: controllers on ctl1, ctl2, ..., agents on node1, node2, ...,
PostgreSQL on db."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.harness import API, free_port
from tests.multihost.netns import VirtualNetwork

PG_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg-test-server.sh"
AGENT_ARGS = ("--tasks-as-agent-user", "--no-cgroups")
CONTROLLER_PORT = 6817  # on a virtual host of its own, slurmctld's port is free
PG_PORT = 55441  # a server of the suite's own: restarting it disturbs no other test
NODE_TIMEOUT_S = 15  # the fencing follows at two thirds of it: 10 s


class Database:
    """The suite's PostgreSQL, by the project's script: on loopback, or on the virtual host `db`."""

    def __init__(self, net: VirtualNetwork | None, tag: str) -> None:
        self.net = net
        # Durable: the suite crashes the server (db_restart), and what it acknowledged must survive that.
        self.env = {**os.environ, "CORRAL_PG_PORT": str(PG_PORT), "CORRAL_PG_DIR": f"/tmp/corral-pg-chaos-{tag}",
                    "CORRAL_PG_DURABLE": "1"}
        if net is not None:
            address = net.hosts["db"].address
            self.env |= {"CORRAL_PG_HOST": address, "CORRAL_PG_ALLOW": address.rsplit(".", 1)[0] + ".0/24"}

    def _script(self, command: str) -> str:
        argv = [str(PG_SCRIPT), command]
        if self.net is not None:
            argv = self.net.hosts["db"].command(argv)
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"pg-test-server.sh {command}: {done.stderr.strip()}")
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""

    def start(self) -> str:
        """Start it (idempotent); its URL."""
        return self._script("start")

    def restart(self) -> None:
        self._script("restart")

    def stop(self) -> None:
        self._script("stop")


class Process:
    """One daemon of the cluster: started, SIGKILLed, paused and resumed as a whole process group."""

    def __init__(self, name: str, argv: list[str], log: Path, net: VirtualNetwork | None = None) -> None:
        self.name, self.log = name, log
        self.argv = argv if net is None else net.hosts[name].command(argv)
        self.popen: subprocess.Popen | None = None
        self.paused = False

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def kill(self) -> None:
        """SIGKILL the daemon alone: the tasks an agent started are sessions of their own and live on."""
        if self.alive:
            self.popen.kill()
            self.popen.wait()
        self.paused = False

    def pause(self) -> None:
        if self.alive and not self.paused:
            os.kill(self.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.alive and self.paused:
            os.kill(self.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        self.resume()
        if self.alive:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


class ChaosCluster:
    def __init__(self, root: Path, db_url: str, controllers: int = 1, nodes: int = 4, gpus: int = 4,
                 config: str = f"kill_grace_s = 2\nnode_timeout_s = {NODE_TIMEOUT_S}\n",
                 net: VirtualNetwork | None = None,
                 database: Database | None = None) -> None:
        self.root, self.db_url, self.gpus, self.net, self.database = root, db_url, gpus, net, database
        self.node_timeout_s = NODE_TIMEOUT_S
        (root / "secret").write_text(os.urandom(16).hex())
        (root / "corral.toml").write_text(config)
        if net is None:
            self.listen = [f"127.0.0.1:{free_port()}" for _ in range(controllers)]
        else:
            self.listen = [f"{net.hosts[f'ctl{i}'].address}:{CONTROLLER_PORT}" for i in range(1, controllers + 1)]
        self.urls = [f"http://{address}" for address in self.listen]
        self.controllers = [self._controller(i) for i in range(controllers)]
        self.agents = {f"node{i}": self._agent(f"node{i}") for i in range(1, nodes + 1)}
        self.http = httpx.Client(headers={"Authorization": f"Bearer {(root / 'secret').read_text()}"}, timeout=10)

    def _controller(self, index: int) -> Process:
        argv = [sys.executable, "-m", "corral.controller", "--listen", self.listen[index], "--db", self.db_url,
                "--secret-file", str(self.root / "secret"), "--config", str(self.root / "corral.toml")]
        if len(self.urls) > 1:
            argv += ["--advertise-url", self.urls[index]]
        return Process(f"ctl{index + 1}", argv, self.root / f"ctl{index + 1}.log", self.net)

    def _agent(self, node: str) -> Process:
        argv = [sys.executable, "-m", "corral.agent", "--controller", ",".join(self.urls),
                "--secret-file", str(self.root / "secret"), "--node", node, "--gpus", str(self.gpus),
                "--cpus", "16", "--mem-mib", "64000", "--spool", str(self.root / "spool" / node), *AGENT_ARGS]
        return Process(node, argv, self.root / f"agent-{node}.log", self.net)

    # ----- the whole cluster

    def start(self, timeout_s: float = 60.0) -> ChaosCluster:
        for process in self.controllers:
            process.start()
        self.wait_leader(timeout_s)
        for process in self.agents.values():
            process.start()
        self.wait_nodes_up(timeout_s)
        return self

    def stop(self) -> None:
        for process in [*self.agents.values(), *self.controllers]:
            process.stop()
        self.http.close()

    def revive(self) -> None:
        """A supervisor's work (systemd, `corral up`): start again what died on its own (a controller that
        could not reach its database for long at start, say); what a fault paused stays paused."""
        for process in [*self.controllers, *self.agents.values()]:
            if not process.alive and not process.paused:
                process.start()

    def heal(self) -> None:
        """Plug every cable back, resume what is paused and restart what is dead."""
        if self.net is not None:
            for host in self.net.host_names:
                self.net.set_link(host, True)
        for process in [*self.controllers, *self.agents.values()]:
            process.resume()
            if not process.alive:
                process.start()

    # ----- who leads, who is up

    def status(self, url: str) -> dict | None:
        """A controller's /status (HA), or a stand-in for a lone controller without it; None if silent."""
        try:
            reply = self.http.get(f"{url}{API}/status", timeout=1.0)
            if reply.status_code == 200:
                return reply.json()
            if reply.status_code == 404 and self.http.get(f"{url}{API}/health", timeout=1.0).status_code == 200:
                return {"role": "leader", "epoch": 0, "url": url}
        except httpx.HTTPError:
            pass
        return None

    def leader(self) -> tuple[str, dict] | None:
        for url, process in zip(self.urls, self.controllers, strict=True):
            if not process.alive or process.paused:
                continue
            found = self.status(url)
            if found is not None and found.get("role") == "leader":
                return url, found
        return None

    def wait_leader(self, timeout_s: float = 30.0) -> tuple[str, dict]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if (found := self.leader()) is not None:
                return found
            time.sleep(0.05)
        raise TimeoutError(f"no controller leads after {timeout_s} s")

    def nodes_up(self) -> set[str]:
        found = self.leader()
        if found is None:
            return set()
        try:
            reply = self.http.get(f"{found[0]}{API}/nodes", timeout=2.0)
        except httpx.HTTPError:
            return set()
        return {n["name"] for n in reply.json() if n["state"] not in ("down", "drained")} if reply.is_success else set()

    def wait_nodes_up(self, timeout_s: float = 30.0, nodes: set[str] | None = None) -> float:
        wanted = nodes or set(self.agents)
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.nodes_up() >= wanted:
                return time.monotonic() - started
            time.sleep(0.1)
        raise TimeoutError(f"nodes {sorted(wanted - self.nodes_up())} not up after {timeout_s} s")

    # ----- API through the leader, following it as a client would

    def call(self, method: str, path: str, timeout_s: float = 30.0, **kwargs) -> httpx.Response:
        """Send to whichever controller leads. Retried only where the request cannot have been acted on:
        no connection, or a standby's 421; anything else is the caller's to judge."""
        deadline = time.monotonic() + timeout_s
        while True:
            for url in self.urls:
                try:
                    reply = self.http.request(method, f"{url}{API}{path}", **kwargs)
                except httpx.ConnectError:
                    continue
                if reply.status_code not in (421, 503):
                    return reply
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no controller answered within {timeout_s} s")
            time.sleep(0.1)
