"""A real cluster on this machine for end-to-end tests: a controller and agents as subprocesses,
talking HTTP on loopback, with a real SQLite database."""
from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from corral.agent.task_spool import TaskSpool, sweep

API = "/api/v1"
FAKE_NVML = Path(__file__).parent / "fake_nvml"  # a pynvml stand-in for agents (no GPU on this machine)


def free_port() -> int:
    """A loopback port free now, for a server a test starts. Chosen below the kernel's ephemeral range: a port
    from bind(0) is in that range, where any outgoing connection on the host may take it as its source port
    before the server binds it (`corral up` then refused its --port and printed nothing on stdout)."""
    lowest_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    lowest = 10_000 if lowest_ephemeral > 12_000 else 1024  # above the ports services are known by
    while True:
        port = lowest + secrets.randbelow(lowest_ephemeral - lowest - 100)  # `corral up` uses a few after it
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # a server of someone else's has it
            return port


def wait_for(what: Callable[[], object], timeout_s: float = 20.0, interval_s: float = 0.05, message: str = ""):
    deadline = time.monotonic() + timeout_s
    while True:
        value = what()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {message or what}")
        time.sleep(interval_s)


def make_tls(root: Path, names: tuple[str, ...] = ("127.0.0.1", "localhost")) -> tuple[Path, Path, Path]:
    """A CA of the test's own and a server certificate for `names`: (CA file, certificate, key)."""
    from corral.tls_certs import CertificateAuthority, write_private

    ca = CertificateAuthority.create("corral test CA")
    ca_file, cert_file, key_file = root / "ca.pem", root / "controller.pem", root / "controller.key"
    ca.save(ca_file, root / "ca.key")
    cert_pem, key_pem = ca.issue(names)
    cert_file.write_bytes(cert_pem)
    write_private(key_file, key_pem)
    return ca_file, cert_file, key_file


class Cluster:
    def __init__(self, root: Path, nodes: int = 2, gpus: int = 4, config: str = "", db: str | None = None,
                 nvml_names: dict[str, list[str]] | None = None,
                 agent_args: tuple[str, ...] = ("--tasks-as-agent-user", "--no-cgroups", "--no-containers"),
                 tls_names: tuple[str, ...] | None = None, controller_args: tuple[str, ...] = (),
                 node_features: dict[str, str] | None = None) -> None:
        """`tls_names`: the controller serves HTTPS with a certificate for these names, from a CA of the
        test's own (`ca_file`), which the agents and `http` trust. `controller_args`: more of its options."""
        self.root = root
        self.controller_args = controller_args
        # The tests submit as made-up users (tester, alice) and run side by side: by default their agents
        # run every task as themselves, outside cgroups. Tests of confinement pass their own.
        self.agent_args = agent_args
        self.node_names = [f"node{i}" for i in range(1, nodes + 1)]
        self.gpus = gpus
        # node -> NVML device names: those agents discover their devices through the NVML path
        # (tests/e2e/fake_nvml) instead of simulating `gpus` of them.
        self.nvml_names = nvml_names or {}
        self.node_features = node_features or {}  # node -> its agent's --feature list ("a,b")
        self.port = free_port()
        self.ca_file, self.tls_args, verify = None, [], True
        if tls_names is not None:
            import ssl

            self.ca_file, cert_file, key_file = make_tls(root, tls_names)
            self.tls_args = ["--tls-cert", str(cert_file), "--tls-key", str(key_file)]
            verify = ssl.create_default_context(cafile=self.ca_file)
            # The harness reaches the controller at 127.0.0.1 whatever names its certificate carries (a test
            # may give it others); corral's own clients check the name.
            verify.check_hostname = False
        self.url = f"{'https' if self.tls_args else 'http'}://127.0.0.1:{self.port}"
        self.secret = secrets.token_urlsafe(16)
        self.secret_file = root / "secret"
        self.secret_file.write_text(self.secret)
        self.config_file = root / "corral.toml"
        self.config_file.write_text(config or "kill_grace_s = 2\nnode_timeout_s = 15\n")
        self.db = db or f"sqlite:///{root / 'corral.db'}"
        self.controller: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.secret}"}, timeout=30,
                                 verify=verify)

    # ----- processes

    def _spawn(self, args: list[str], log: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        out = open(self.root / log, "ab")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        return subprocess.Popen([sys.executable, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)

    def start_controller(self, timeout_s: float = 20.0) -> None:
        self.controller = self._spawn(
            ["-m", "corral.controller", "--listen", f"127.0.0.1:{self.port}", "--db", self.db,
             "--secret-file", str(self.secret_file), "--config", str(self.config_file), *self.tls_args,
             *self.controller_args],
            "controller.log")
        wait_for(self._healthy, timeout_s, message="controller health")

    def _healthy(self) -> bool:
        if self.controller.poll() is not None:
            raise AssertionError(f"controller exited: {(self.root / 'controller.log').read_text()}")
        try:
            return self.http.get(f"{API}/health").status_code == 200
        except httpx.TransportError:
            return False

    def start_agent(self, name: str, env: dict[str, str] | None = None) -> None:
        """Start one node's agent, with `env` added to its environment; it registers in the background. A
        node named in `nvml_names` discovers its GPUs through the real NVML code path, over a stand-in pynvml
        that reports those names."""
        gpus, env = ["--gpus", str(self.gpus)], dict(env or {})
        if name in self.nvml_names:
            path = os.pathsep.join(p for p in (str(FAKE_NVML), os.environ.get("PYTHONPATH")) if p)
            gpus = []
            env.update({"PYTHONPATH": path, "FAKE_NVML_NAMES": ",".join(self.nvml_names[name]),
                        "FAKE_NVML_HEALTH": str(self.nvml_faults(name))})
        self.agents[name] = self._spawn(
            ["-m", "corral.agent", "--controller", self.url, "--secret-file", str(self.secret_file),
             "--node", name, *gpus, "--cpus", "16", "--mem-mib", "64000",
             "--spool", str(self.root / "spool" / name), *self.agent_args,
             *(["--feature", self.node_features[name]] if name in self.node_features else []),
             *(["--ca-file", str(self.ca_file)] if self.ca_file else [])], f"agent-{name}.log", env)

    def nvml_faults(self, name: str) -> Path:
        """The file a test writes to inject faults into the NVML node `name` (tests/e2e/fake_nvml)."""
        return self.root / f"nvml-faults-{name}.json"

    def kill_agent(self, name: str) -> None:
        """SIGKILL the agent alone (its tasks are sessions of their own: they live on)."""
        self.agents[name].kill()
        self.agents[name].wait()

    def start_agents(self) -> None:
        for name in self.node_names:
            self.start_agent(name)
        wait_for(lambda: {n["name"] for n in self.nodes() if n["state"] != "down"} >= set(self.node_names),
                 message="agents registered")

    def start(self) -> "Cluster":
        self.start_controller()
        self.start_agents()
        return self

    def kill_controller(self) -> None:
        os.killpg(self.controller.pid, signal.SIGKILL)
        self.controller.wait()

    def stop(self) -> None:
        procs = list(self.agents.values()) + ([self.controller] if self.controller else [])
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.http.close()
        self.end_tasks()

    def end_tasks(self) -> None:
        """Tasks outlive their agent by design (decision 0015): what a test left running (a service's
        replicas, a job it did not wait for) is ended here, through the agents' own records, so that no
        task leader of this cluster outlives it."""
        for name in self.node_names:
            sweep(TaskSpool(self.root / "spool" / name), grace_s=2)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.root.glob("*.log")))

    # ----- API

    def submit(self, **fields) -> int:
        body = {"workdir": str(self.root), "user": "tester", "env": {"PATH": os.environ["PATH"]}, **fields}
        reply = self.http.post(f"{API}/jobs", json=body)
        assert reply.status_code == 201, reply.text
        return reply.json()["job_id"]

    def job(self, job_id: int) -> dict:
        reply = self.http.get(f"{API}/jobs/{job_id}")
        assert reply.status_code == 200, reply.text
        return reply.json()

    def nodes(self) -> list[dict]:
        return self.http.get(f"{API}/nodes").json()

    def wait_state(self, job_id: int, *states: str, timeout_s: float = 30.0) -> dict:
        found = {}

        def reached() -> bool:
            found.update(self.job(job_id))
            return found["state"] in states

        try:
            wait_for(reached, timeout_s, message=f"job {job_id} in {states}")
        except AssertionError:
            raise AssertionError(f"job {job_id} is {found.get('state')} ({found.get('reason')}), "
                                 f"not {states}\n{self.logs()}") from None
        return found
