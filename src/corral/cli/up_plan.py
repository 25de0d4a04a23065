"""What `corral up` starts, decided purely from its options and the host (unit-testable).

Node sizes: every simulated node gets all of the host's CPUs (at least 2): CPU time is shared, so
overcommitting only slows jobs down, and jobs asking for many CPUs per task still fit. Memory is split
evenly between the nodes: it cannot be shared, and the cluster must not promise more than the host has.

GPUs: with --gpus-per-node G every node simulates G GPUs. Without it, agents discover real GPUs when
NVML finds some; then a single node is started, because several agents on one host would each claim
every GPU. Without NVML each node simulates 4.

TLS (--tls): the controller serves HTTPS with a certificate from the cluster's private CA, kept in
STATE_DIR/tls; the agents and clients verify it against that CA (cluster.json records it)."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from corral.cli.errors import CliError
from corral.cli.hostinfo import HostFacts

DEFAULT_SIMULATED_GPUS = 4
DEFAULT_SIMULATED_NODES = 2
MIN_NODE_CPUS = 2


@dataclass(frozen=True, slots=True)
class UpOptions:
    state_dir: Path
    nodes: int | None = None
    gpus_per_node: int | None = None
    host: str = "127.0.0.1"
    port: int = 6817
    db_url: str | None = None
    config: Path | None = None
    tls: bool = False


@dataclass(frozen=True, slots=True)
class UpPlan:
    url: str  # what clients and agents connect to
    host: str
    port: int
    state_dir: Path
    secret_file: Path
    log_dir: Path
    node_names: tuple[str, ...]
    gpus_per_node: int | None  # None: real GPUs, discovered by the agent
    controller_argv: tuple[str, ...]
    agent_argvs: tuple[tuple[str, ...], ...]
    spool_dirs: tuple[Path, ...]  # one per node, where its agent records its running tasks
    agent_credential_files: tuple[Path, ...] = ()  # one per node (0600): only that node's agent may use it
    auth_socket: Path | None = None  # where local users get their credential (docs/security.md)
    tls_dir: Path | None = None  # --tls: the CA and the controller's certificate and key live here

    @property
    def ca_file(self) -> Path | None:
        return None if self.tls_dir is None else tls_files(self.tls_dir)[0]


def client_url(host: str, port: int, scheme: str = "http") -> str:
    """The URL to reach a server listening on host:port (a wildcard address means this machine)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def tls_files(tls_dir: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, controller certificate, controller key), as corral.tls_certs.cluster_tls writes them."""
    return tls_dir / "ca.pem", tls_dir / "controller.pem", tls_dir / "controller.key"


def plan_up(options: UpOptions, facts: HostFacts, python: str = sys.executable) -> UpPlan:
    real_gpus = options.gpus_per_node is None and bool(facts.nvml_gpus)
    nodes = options.nodes or (1 if real_gpus else DEFAULT_SIMULATED_NODES)
    if real_gpus and nodes > 1:
        raise CliError(
            f"NVML finds {facts.nvml_gpus} GPU(s) here, and with --nodes {nodes} every agent would claim all "
            "of them: use --nodes 1 to run on the real GPUs, or --gpus-per-node G to simulate nodes"
        )
    gpus = options.gpus_per_node
    if gpus is None and not real_gpus:
        gpus = DEFAULT_SIMULATED_GPUS
    state_dir = options.state_dir
    secret_file = state_dir / "secret"
    url = client_url(options.host, options.port, "https" if options.tls else "http")
    tls_dir = state_dir / "tls" if options.tls else None
    names = tuple(f"node{i}" for i in range(1, nodes + 1))
    # Simulated nodes advertise at least 4 CPUs per GPU: CPUs are not enforced on processes, and a small
    # host must not make GPU-shaped jobs (a task per GPU) unplaceable.
    node_size = (max(MIN_NODE_CPUS, facts.cpus, 4 * (gpus or 0)), max(1, facts.mem_mib // nodes))
    credentials = tuple(state_dir / "agents" / f"{name}.credential" for name in names)
    socket_path = auth_socket_path(state_dir, options.port, os.geteuid())
    return UpPlan(
        url=url, host=options.host, port=options.port, state_dir=state_dir, secret_file=secret_file,
        log_dir=state_dir / "logs", node_names=names, gpus_per_node=gpus,
        controller_argv=_controller_argv(python, options, secret_file, socket_path, tls_dir),
        agent_argvs=tuple(_agent_argv(python, url, credential, name, gpus, node_size,
                                      spool_dir(state_dir, name, options.port, os.geteuid()), tls_dir)
                          for name, credential in zip(names, credentials, strict=True)),
        spool_dirs=tuple(spool_dir(state_dir, name, options.port, os.geteuid()) for name in names),
        agent_credential_files=credentials, auth_socket=socket_path, tls_dir=tls_dir,
    )


def auth_socket_path(state_dir: Path, port: int, euid: int) -> Path:
    """Root's cluster serves every user of the host: a world-reachable directory, one per port (so two
    clusters on one host never share it). Another user's cluster serves only that user (its state dir)."""
    return Path(f"/run/corral/{port}/auth.sock") if euid == 0 else state_dir / "auth.sock"


def spool_dir(state_dir: Path, node: str, port: int, euid: int) -> Path:
    """Where a node's agent keeps batch scripts and its task record. Root's agents run each job as its
    user, who must reach their own script (as under slurmd's /var/spool/slurmd): a world-traversable
    directory, one per port; the job directories in it are the users' own and 0700."""
    return Path(f"/var/spool/corral/{port}/{node}") if euid == 0 else state_dir / "spool" / node


def _controller_argv(python: str, options: UpOptions, secret_file: Path, auth_socket: Path,
                     tls_dir: Path | None) -> tuple[str, ...]:
    db_url = options.db_url or f"sqlite:///{options.state_dir / 'corral.db'}"
    listen = f"[{options.host}]:{options.port}" if ":" in options.host else f"{options.host}:{options.port}"
    argv = [python, "-m", "corral.controller", "--listen", listen, "--db", db_url,
            "--secret-file", str(secret_file), "--state-dir", str(options.state_dir), "--auth-socket", str(auth_socket)]
    if options.config is not None:
        argv += ["--config", str(options.config)]
    if tls_dir is not None:
        _, cert, key = tls_files(tls_dir)
        argv += ["--tls-cert", str(cert), "--tls-key", str(key)]
    return tuple(argv)


def _agent_argv(python: str, url: str, secret_file: Path, name: str, gpus: int | None,
                node_size: tuple[int, int], spool: Path, tls_dir: Path | None) -> tuple[str, ...]:
    cpus, mem_mib = node_size
    argv = [python, "-m", "corral.agent", "--controller", url, "--secret-file", str(secret_file),
            "--node", name, "--cpus", str(cpus), "--mem-mib", str(mem_mib), "--spool", str(spool),
            # The agents are the cluster's: when `corral up` goes, even killed outright (its children get
            # SIGTERM then), their tasks go with them.
            "--kill-tasks-on-exit"]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    if tls_dir is not None:
        argv += ["--ca-file", str(tls_files(tls_dir)[0])]
    return tuple(argv)
