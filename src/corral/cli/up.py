"""`corral up`: a whole cluster on this machine (controller + N agents) in the foreground; with
--controllers N, N controllers sharing a PostgreSQL server started for them, their leader serving."""
from __future__ import annotations

import fcntl
import os
import secrets
import signal
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from corral.cli.client import Client, ControllerUnreachable
from corral.cli.config import (
    DEFAULT_PORT,
    default_state_dir,
    remove_system_cluster_file,
    write_private_file,
)
from corral.cli.errors import CliError
from corral.cli.output import reported_errors
from corral.cli.supervisor import ChildExited, Supervisor
from corral.cli.up_identity import (
    Recorded,
    cluster_identity,
    keep_cluster_id,
    record_cluster,
    system_file_words,
    user_file_words,
)
from corral.cli.up_plan import UpOptions, UpPlan, plan_up, tls_files
from corral.cli.up_postgres import check_can_start, start_postgres, stop_postgres
from corral.cli.up_stop import kill_leftover_tasks, stop_cluster_jobs

STARTUP_TIMEOUT_S = 60.0
GATEWAY = "gateway"  # its name in logs and messages
POLL_INTERVAL_S = 0.1


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: shut down as for Ctrl-C."""


@dataclass(slots=True)
class Cluster:
    """The children of one `corral up`; whatever was started, stop() ends it: the jobs first (through the
    controller, while the agents still run), then the agents, then the controllers, then their PostgreSQL."""

    plan: UpPlan
    supervisor: Supervisor
    name: str = "corral"  # as the controller's /health says
    isolation: str = ""  # how the agents confine jobs, as they registered it (for the banner)
    controller_answered: bool = False
    postgres_started: bool = False

    def stop(self, grace_s: float = 10.0, stop_jobs: bool = True) -> None:
        """`stop_jobs=False`: no waiting for the jobs (asked twice); the agents kill their tasks anyway."""
        children = self.supervisor.children
        controllers = [c for c in children if c.name in self.plan.controller_names]
        if stop_jobs and controllers and self.controller_answered:  # else no job can have started
            alive = any(c.process.poll() is None for c in controllers)
            stop_cluster_jobs(self.plan, controller_alive=alive)
        # The gateway and the agents together: neither has anything to hand to the other on the way out.
        agents = [c for c in children if c.name not in self.plan.controller_names]
        self.supervisor.stop([agents, controllers], grace_s)
        kill_leftover_tasks(self.plan)
        if self.postgres_started and self.plan.postgres is not None:
            try:
                stop_postgres(self.plan.postgres)
            except CliError as exc:
                typer.echo(f"corral: {exc}", err=True)


@contextmanager
def state_dir_lock(state_dir: Path) -> Iterator[None]:
    """One `corral up` per state dir: a second would overwrite the first one's secret and database."""
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state_dir / "up.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(f"another 'corral up' is running with state dir {state_dir}") from None
        yield


def check_port_free(host: str, port: int, option: str = "--port") -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT is no obstacle
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror} "
                           f"(is another 'corral up' running? choose another {option})") from None


def write_secret(path: Path) -> None:
    write_private_file(path, secrets.token_urlsafe(32) + "\n")


def write_agent_credentials(plan: UpPlan) -> None:
    """Each node's own credential (0600), signed with the key the controller derives from the secret."""
    from corral.controller.credentials import issue_agent, signing_key

    key = signing_key(plan.secret_file.read_text().strip())
    for name, path in zip(plan.node_names, plan.agent_credential_files, strict=True):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private_file(path, issue_agent(key, name) + "\n")


def make_certificates(plan: UpPlan) -> None:
    """--tls: the cluster's CA (kept across runs) and a controller certificate naming every way this host
    is reached: localhost, loopback, its host names and the address the controller listens on."""
    if plan.tls_dir is None:
        return
    from corral.tls_certs import TlsSetupError, cluster_tls

    names = ["localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn(), plan.host]
    try:
        cluster_tls(*tls_files(plan.tls_dir), names)
    except (TlsSetupError, OSError) as exc:
        raise CliError(f"cannot make the TLS certificates in {plan.tls_dir}: {exc}") from None


def start_cluster(cluster: Cluster, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Start the controllers, then the agents once they answer; return when every node is up.

    Raises ChildExited or CliError; the caller stops what was started (cluster.stop)."""
    plan, supervisor = cluster.plan, cluster.supervisor
    deadline = _Deadline(time.monotonic() + timeout_s, timeout_s, plan.log_dir)
    for name, argv in zip(plan.controller_names, plan.controller_argvs, strict=True):
        supervisor.start(name, argv)
    ca_file = str(plan.ca_file) if plan.ca_file else None
    secret = plan.secret_file.read_text().strip()
    urls = plan.urls or (plan.url,)
    for url in urls:  # the health check answers from every controller, standby or not
        what = "the controller" if len(urls) == 1 else f"the controller at {url}"
        with Client(url, secret, timeout_s=2.0, ca_file=ca_file) as one:
            cluster.name = _wait_for_health(one, supervisor, deadline, what).get("cluster", cluster.name)
    cluster.controller_answered = True
    with Client(urls, secret, timeout_s=2.0, ca_file=ca_file) as client:
        for name, argv in zip(plan.node_names, plan.agent_argvs, strict=True):
            supervisor.start(name, argv)
        nodes = _wait_for_nodes(client, supervisor, plan.node_names, deadline)
    cluster.isolation = isolation_words(nodes)
    if plan.gateway_argv and plan.gateway_port is not None:
        supervisor.start(GATEWAY, plan.gateway_argv)
        _wait_for_listener(supervisor, plan.host, plan.gateway_port, deadline)


def _wait_for_listener(supervisor: Supervisor, host: str, port: int, deadline: _Deadline) -> None:
    """Until the gateway accepts connections: the banner's curl must work as soon as it is printed."""
    connect_to = "127.0.0.1" if host in ("", "0.0.0.0") else "::1" if host == "::" else host
    while True:
        supervisor.check_alive()
        try:
            socket.create_connection((connect_to, port), timeout=1.0).close()
            return
        except OSError:
            deadline.sleep_or_fail(f"the gateway did not listen on {host}:{port}")


def isolation_words(nodes: list[dict]) -> str:
    """How the agents confine jobs (as `corral nodes` says it), once when all say the same, else per node;
    without cgroups, why (the first such node's reason: a user's cluster on a host whose cgroups are
    root's, --no-cgroups...)."""
    from corral.cli.render import isolation

    said: dict[str, list[str]] = {}
    for node in nodes:
        said.setdefault(isolation(node), []).append(node["name"])
    words = next(iter(said)) if len(said) == 1 else "; ".join(
        f"{', '.join(names)}: {text}" for text, names in said.items())
    why = next((f"{node['name']}: {node['cgroups'].removeprefix('no cgroups: ')}" for node in nodes
                if isolation(node).endswith("no cgroups") and node.get("cgroups")), None)
    return f"{words} ({why})" if why else words


@dataclass(frozen=True, slots=True)
class _Deadline:
    end: float  # time.monotonic()
    timeout_s: float
    log_dir: Path

    def sleep_or_fail(self, what: str) -> None:
        if time.monotonic() > self.end:
            raise CliError(f"{what} within {self.timeout_s:g} s; see the logs in {self.log_dir}")
        time.sleep(POLL_INTERVAL_S)


def _wait_for_health(client: Client, supervisor: Supervisor, deadline: _Deadline,
                     what: str = "the controller") -> dict:
    while True:
        supervisor.check_alive()
        try:
            return client.health()
        except ControllerUnreachable:
            deadline.sleep_or_fail(f"{what} did not answer")


def _wait_for_nodes(client: Client, supervisor: Supervisor, names: tuple[str, ...],
                    deadline: _Deadline) -> list[dict]:
    """The nodes `names`, once all are up."""
    while True:
        supervisor.check_alive()  # first: a dead controller is reported as such, not as unreachable
        try:
            up = {node["name"]: node for node in client.nodes() if node["state"] != "down"}
        except ControllerUnreachable:
            up = {}
        missing = [name for name in names if name not in up]
        if not missing:
            return [up[name] for name in names]
        deadline.sleep_or_fail(f"nodes {', '.join(missing)} did not register")


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt like Ctrl-C (as _Stop), so every path stops the children."""
    def _raise_stop(signum: int, frame: object) -> None:
        raise _Stop()

    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_foreground(cluster: Cluster) -> int:
    """Block until a child dies (then exit status 1); signals interrupt as KeyboardInterrupt/_Stop. A
    controller of several is started again instead: it joins as a standby while another leads."""
    names = cluster.plan.controller_names
    restartable = (lambda child: child.name in names) if len(names) > 1 else (lambda child: False)
    try:
        while True:
            for line in cluster.supervisor.check_alive(restartable):
                typer.echo(f"corral: {line}", err=True)
            time.sleep(0.5)
    except ChildExited as exc:
        typer.echo(f"corral: error: {exc}\ncorral: stopping the cluster", err=True)
        return 1


def run_up(plan: UpPlan) -> int:
    """Everything `corral up` does once planned; returns the exit status."""
    with state_dir_lock(plan.state_dir), stop_on_signals():
        for port in plan.ports:
            check_port_free(plan.host, port)
        if plan.gateway_port is not None:
            check_port_free(plan.host, plan.gateway_port, "--gateway-port")
        if plan.postgres is not None:
            check_can_start()
        keep_cluster_id(plan)
        write_secret(plan.secret_file)
        write_agent_credentials(plan)
        make_certificates(plan)
        cluster, ready, system_file = Cluster(plan, Supervisor(plan.log_dir)), False, None
        urls = plan.urls or (plan.url,)
        try:
            if plan.postgres is not None:
                cluster.postgres_started = True  # from here on, stopping stops it too
                start_postgres(plan.postgres)
            start_cluster(cluster)
            ready = True
            recorded = record_cluster(plan, urls)
            system_file = recorded.system_file
            # Root's cluster serves every user of this host: whether they can run its commands.
            warnings = shared_install_warnings() if os.geteuid() == 0 and plan.auth_socket is not None else []
            typer.echo(banner(cluster, recorded, warnings))
            return wait_foreground(cluster)
        except (KeyboardInterrupt, _Stop):
            typer.echo("\ncorral: stopping the jobs, then the agents and the controller...", err=True)
            return 0 if ready else 130
        finally:
            if system_file is not None:
                remove_system_cluster_file(system_file, plan.url, plan.cluster_id)
            try:
                cluster.stop()
            except (KeyboardInterrupt, _Stop):  # asked again: no more waiting
                cluster.stop(grace_s=0.0, stop_jobs=False)


def shared_install_warnings() -> list[str]:
    from corral.cli.shared_install import install_warning, unreachable_install

    problem = unreachable_install()
    return [install_warning(problem)] if problem else []


def banner(cluster: Cluster, recorded: Recorded, warnings: Sequence[str] = ()) -> str:
    plan = cluster.plan
    gpus = "real GPUs" if plan.gpus_per_node is None else f"{plan.gpus_per_node} simulated GPUs each"
    several = len(plan.urls) > 1
    return (
        f"corral: cluster '{cluster.name}' is up: {len(plan.node_names)} node(s), {gpus}\n"
        + (f"  API:       {', '.join(plan.urls)} ({len(plan.urls)} controllers: their leader answers; "
           "'corral status' says which)\n" if several else f"  API:       {plan.url}\n")
        + f"  dashboard: {plan.url}/ in a browser (sign in with a token from 'corral token create')\n"
        + (f"  database:  PostgreSQL, data in {plan.postgres.data_dir}\n" if plan.postgres else "")
        + f"  secret:    {plan.secret_file} {user_file_words(plan, recorded)}\n"
        + f"  users:     {plan.auth_socket} gives this host's users their credential"
        + system_file_words(recorded)
        + (f"  isolation: {cluster.isolation}\n" if cluster.isolation else "")
        + (f"  CA:        {plan.ca_file} (clients verify the controller with it; recorded there too)\n"
           if plan.ca_file else "")
        + (f"  health:    {plan.health_check}\n" if plan.health_check else "")
        + (f"  gateway:   {plan.gateway_url}/s/SERVICE/ serves each service ('corral service apply -f svc.toml')\n"
           if plan.gateway_url else "") +
        f"  logs:      {plan.log_dir}\n"
        + "".join(f"  warning:   {text}\n" for text in warnings) +
        "Run jobs from another shell, for example:\n"
        f"  corral run -N {len(plan.node_names)} --gpus-per-node 1 -- sh -c 'hostname; echo $CUDA_VISIBLE_DEVICES'\n"
        "  corral submit job.sh   (a batch script: runs once, its srun lines start the tasks)\n"
        "  corral queue; corral nodes; corral acct\n"
        + (f"  curl -H \"Authorization: Bearer $(corral token create)\" {plan.gateway_url}/s/NAME/   (a service)\n"
           if plan.gateway_url else "") +
        "Press Ctrl-C to stop the cluster (running jobs are stopped and requeued)."
    )


def up(
    nodes: Annotated[int | None, typer.Option("--nodes", "-N", min=1, show_default=False, metavar="N",
                                              help="Nodes to start. Default: 2, or 1 on real GPUs.")] = None,
    gpus_per_node: Annotated[int | None, typer.Option(
        "--gpus-per-node", min=0, show_default=False, metavar="N",
        help="Simulated GPUs per node. Default: the real GPUs if NVML finds any, else 4 simulated.")] = None,
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Controller port.")] = DEFAULT_PORT,
    host: Annotated[str, typer.Option("--host", help="Address the controller listens on.")] = "127.0.0.1",
    state_dir: Annotated[Path | None, typer.Option(
        "--state-dir", show_default=False, metavar="DIR",
        help="Secret, database, logs, spool. Default: $XDG_STATE_HOME/corral or ~/.local/state/corral.")] = None,
    db: Annotated[str | None, typer.Option("--db", show_default=False, metavar="URL",
                                           help="Database URL. Default: SQLite in the state dir.")] = None,
    config: Annotated[Path | None, typer.Option("--config", show_default=False, metavar="FILE", exists=True,
                                                dir_okay=False,
                                                help="Controller config file (partitions...).")] = None,
    tls: Annotated[bool, typer.Option("--tls", help="Serve HTTPS with a certificate from a private CA made in "
                                                    "the state dir (kept across runs); clients verify it.")] = False,
    controllers: Annotated[int, typer.Option(
        "--controllers", metavar="N",
        help="Controllers to start, on N consecutive ports from --port: one leads, the others stand by to take "
             "over. More than one share a PostgreSQL server started for them (installed if missing, as root) "
             "unless --db names one.")] = 1,
    health_program: Annotated[Path | None, typer.Option(
        "--health-program", show_default=False, metavar="PATH",
        help="The operator's node health check (as Slurm's HealthCheckProgram, e.g. /usr/sbin/nhc), run by every "
             "agent at its start and every --health-interval: a non-zero exit drains the node with its output "
             "as the reason, and requeues its jobs.")] = None,
    health_interval: Annotated[float | None, typer.Option(
        "--health-interval", min=0, max=7 * 86400, show_default=False, metavar="SECONDS",
        help="How often the health check runs (0: only when each agent starts, and before jobs with "
             "--health-before-job). Default: 300.")] = None,
    health_before_job: Annotated[bool, typer.Option(
        "--health-before-job", help="Also run the health check before each job starts on a node.")] = False,
    pids_max: Annotated[int | None, typer.Option(
        "--pids-max", min=0, show_default=False, metavar="N",
        help="How many processes and threads each job may have at once on a node (cgroup pids.max; 0: no "
             "limit). Default: 15% of the kernel's pid_max.")] = None,
    gateway_port: Annotated[int | None, typer.Option(
        "--gateway-port", min=1, max=65535, show_default=False, metavar="PORT",
        help="The services' gateway's port (http://HOST:PORT/s/SERVICE/). Default: --port + 3 (6820), or "
             "the port past the controllers' when there are more than three.")] = None,
    no_gateway: Annotated[bool, typer.Option("--no-gateway", help="Start no gateway (no service endpoints).")] = False,
) -> None:
    """Start a cluster on this machine (a controller and N agents) and keep it running until Ctrl-C, which
    stops its running jobs (requeued, or NODE_FAIL with --no-requeue) and then the cluster."""
    from corral.cli.hostinfo import probe_host

    with reported_errors():
        state = (state_dir or default_state_dir()).absolute()
        options = UpOptions(state_dir=state, cluster_id=cluster_identity(state), nodes=nodes,
                            gpus_per_node=gpus_per_node, host=host, port=port, db_url=db, config=config, tls=tls,
                            controllers=controllers, health_program=health_program,
                            health_interval_s=health_interval, health_before_job=health_before_job,
                            pids_max=pids_max, gateway=not no_gateway, gateway_port=gateway_port,
                            config_gateway_url=_config_gateway_url(config))
        code = run_up(plan_up(options, probe_host()))
    raise typer.Exit(code)


def _config_gateway_url(config: Path | None) -> str | None:
    """The config's [gateway] url, checked now: a bad one stops `corral up` before anything starts."""
    from corral.controller.settings import SettingsError, load_gateway_url

    try:
        return load_gateway_url(config)
    except SettingsError as exc:
        raise CliError(str(exc)) from None
