"""What `corral up` starts, decided purely from its options and the host (unit-testable).

Node sizes: every simulated node gets all of the host's CPUs (at least 2): CPU time is shared, so
overcommitting only slows jobs down, and jobs asking for many CPUs per task still fit. Memory is split
evenly between the nodes: it cannot be shared, and the cluster must not promise more than the host has.

GPUs: with --gpus-per-node G every node simulates G GPUs. Without it, agents discover real GPUs when
NVML finds some; then a single node is started, because several agents on one host would each claim
every GPU. Without NVML each node simulates 4.

TLS (--tls): the controller serves HTTPS with a certificate from the cluster's private CA, kept in
STATE_DIR/tls; the agents and clients verify it against that CA (cluster.json records it).

Controllers (--controllers N): N > 1 controllers listen on N consecutive ports from --port, each told its own
URL (--advertise-url), and share a database: PostgreSQL (SQLite is one process's), started for them
(up_postgres.py) unless --db names one. Agents and cluster.json get every URL.

Gateway (docs/services.md): one `corral gateway` beside the controllers serves every service at
http://HOST:GWPORT/s/NAME/, on --gateway-port (default: --port + 3, or past the controllers' when more than
three); --no-gateway starts none."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from corral.cli.errors import CliError
from corral.cli.hostinfo import HostFacts
from corral.cli.up_postgres import PostgresPlan, postgres_data_dir

DEFAULT_SIMULATED_GPUS = 4
DEFAULT_SIMULATED_NODES = 2
MIN_NODE_CPUS = 2
GATEWAY_PORT_OFFSET = 3


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
    controllers: int = 1
    # The operator's health-check program, given to every agent (corral.agent --health-program ...).
    health_program: Path | None = None
    health_interval_s: float | None = None  # None: the agent's default
    health_before_job: bool = False
    pids_max: int | None = None  # each job's limit on processes and threads (agent --pids-max); None: its default
    # The cluster's id on this host (cluster_identity()): in its agents' cgroup and spool names, so that two
    # clusters here, their nodes named alike, never touch each other's jobs. None: the agents get none.
    cluster_id: str | None = None
    gateway: bool = True
    gateway_port: int | None = None  # None: the port after the controllers'
    # The config's own [gateway] url (the gateway as browsers elsewhere reach it): the controllers keep it;
    # without one, they are told the gateway this starts (--gateway-url), for the dashboard's links.
    config_gateway_url: str | None = None


@dataclass(frozen=True, slots=True)
class UpPlan:
    url: str  # the first controller's: what clients and agents connect to
    host: str
    port: int  # the first controller's
    state_dir: Path
    secret_file: Path
    log_dir: Path
    node_names: tuple[str, ...]
    gpus_per_node: int | None  # None: real GPUs, discovered by the agent
    controller_argvs: tuple[tuple[str, ...], ...]  # one per controller
    agent_argvs: tuple[tuple[str, ...], ...]
    spool_dirs: tuple[Path, ...]  # one per node, where its agent records its running tasks
    agent_credential_files: tuple[Path, ...] = ()  # one per node (0600): only that node's agent may use it
    health_check: str | None = None  # what the agents' health check is, in words (for the banner)
    auth_socket: Path | None = None  # where local users get their credential (docs/security.md)
    tls_dir: Path | None = None  # --tls: the CA and the controller's certificate and key live here
    urls: tuple[str, ...] = ()  # every controller's, the first one first
    postgres: PostgresPlan | None = None  # the server started for several controllers
    cluster_id: str | None = None  # as UpOptions'
    gateway_argv: tuple[str, ...] = ()  # empty: no gateway (--no-gateway)
    gateway_port: int | None = None

    @property
    def gateway_url(self) -> str | None:
        return None if self.gateway_port is None else client_url(self.host, self.gateway_port)

    @property
    def controller_argv(self) -> tuple[str, ...]:
        return self.controller_argvs[0]

    @property
    def controller_names(self) -> tuple[str, ...]:
        """Their names in logs and messages: "controller" alone, else controller1..N."""
        count = len(self.controller_argvs)
        return ("controller",) if count == 1 else tuple(f"controller{i}" for i in range(1, count + 1))

    @property
    def ports(self) -> tuple[int, ...]:
        """The controllers' ports, which `corral up` needs free (its PostgreSQL server listens on no TCP port:
        its number only names the socket in the server's own data directory)."""
        return tuple(range(self.port, self.port + len(self.controller_argvs)))

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
    _check_health_options(options)
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
    ports, postgres, db_url = _controller_ports_and_database(options)
    scheme = "https" if options.tls else "http"
    urls = tuple(client_url(options.host, port, scheme) for port in ports)
    tls_dir = state_dir / "tls" if options.tls else None
    names = tuple(f"node{i}" for i in range(1, nodes + 1))
    gateway_port = _gateway_port(options, ports)
    # Simulated nodes advertise at least 4 CPUs per GPU: CPUs are not enforced on processes, and a small
    # host must not make GPU-shaped jobs (a task per GPU) unplaceable.
    node_size = (max(MIN_NODE_CPUS, facts.cpus, 4 * (gpus or 0)), max(1, facts.mem_mib // nodes))
    credentials = tuple(state_dir / "agents" / f"{name}.credential" for name in names)
    sockets = tuple(_auth_socket(state_dir, port, len(ports)) for port in ports)
    started_gateway = client_url(options.host, gateway_port) if gateway_port else None
    gateway_argv = ("--gateway-url", started_gateway) if started_gateway and not options.config_gateway_url else ()
    controllers = tuple(
        _controller_argv(python, options, port, db_url, secret_file, socket, tls_dir, url if len(ports) > 1 else None)
        + _cluster_id_argv(options.cluster_id) + gateway_argv
        for port, socket, url in zip(ports, sockets, urls, strict=True))
    agent_url = ",".join(urls)
    spools = tuple(spool_dir(state_dir, name, options.port, os.geteuid(), options.cluster_id) for name in names)
    images = image_cache_dir(state_dir, options.port, os.geteuid(), options.cluster_id)
    return UpPlan(
        url=urls[0], host=options.host, port=options.port, state_dir=state_dir, secret_file=secret_file,
        log_dir=state_dir / "logs", node_names=names, gpus_per_node=gpus, controller_argvs=controllers,
        agent_argvs=tuple(_agent_argv(python, agent_url, credential, name, gpus, node_size, spool, tls_dir, images)
                          + _cluster_id_argv(options.cluster_id) + _health_argv(options)
                          + (("--pids-max", str(options.pids_max)) if options.pids_max is not None else ())
                          for name, credential, spool in zip(names, credentials, spools, strict=True)),
        spool_dirs=spools, agent_credential_files=credentials, auth_socket=sockets[0], tls_dir=tls_dir, urls=urls,
        postgres=postgres, health_check=_health_words(options), cluster_id=options.cluster_id,
        gateway_argv=_gateway_argv(python, options, gateway_port, urls, secret_file, tls_dir) if gateway_port else (),
        gateway_port=gateway_port,
    )


def _gateway_port(options: UpOptions, controller_ports: tuple[int, ...]) -> int | None:
    if not options.gateway:
        if options.gateway_port is not None:
            raise CliError("--gateway-port and --no-gateway contradict each other: give one")
        return None
    # By default 6820 beside the default 6817 (slurmrestd's number in Slurm's 6817-6820, and `corral gateway`'s
    # own default), and past the controllers' when there are more than three.
    default = max(controller_ports[0] + GATEWAY_PORT_OFFSET, controller_ports[-1] + 1)
    port = options.gateway_port if options.gateway_port is not None else default
    if port in controller_ports:
        raise CliError(f"--gateway-port {port} is a controller's port ({', '.join(map(str, controller_ports))}): "
                       "choose another")
    if port > 65535:
        raise CliError(f"the gateway would listen on port {port}, past 65535: choose --gateway-port or a lower --port")
    return port


def _gateway_argv(python: str, options: UpOptions, port: int, urls: tuple[str, ...], secret_file: Path,
                  tls_dir: Path | None) -> tuple[str, ...]:
    argv = [python, "-m", "corral.cli.main", "gateway", "--controller", ",".join(urls), "--host", options.host,
            "--port", str(port), "--secret-file", str(secret_file)]
    if tls_dir is not None:
        argv += ["--ca-file", str(tls_files(tls_dir)[0])]
    return tuple(argv)


def _cluster_id_argv(cluster_id: str | None) -> tuple[str, ...]:
    return () if cluster_id is None else ("--cluster-id", cluster_id)


def _check_health_options(options: UpOptions) -> None:
    program = options.health_program
    if program is not None and (not program.is_file() or not os.access(program, os.X_OK)):
        raise CliError(f"--health-program {program}: not an executable file")
    if program is None and (options.health_before_job or options.health_interval_s is not None):
        raise CliError("--health-interval and --health-before-job need --health-program: it is the program "
                       "they run")


def _health_words(options: UpOptions) -> str | None:
    if options.health_program is None:
        return None
    from corral.agent.health import HealthConfig

    every = HealthConfig.interval_s if options.health_interval_s is None else options.health_interval_s
    when = "when each agent starts" + (f" and every {every:g} s" if every else "")
    before = ", and before each job" if options.health_before_job else ""
    return f"{options.health_program.absolute()} {when}{before}; a failure drains the node"


def _health_argv(options: UpOptions) -> tuple[str, ...]:
    if options.health_program is None:
        return ()
    argv = ["--health-program", str(options.health_program.absolute())]
    if options.health_interval_s is not None:
        argv += ["--health-interval", f"{options.health_interval_s:g}"]
    if options.health_before_job:
        argv.append("--health-before-job")
    return tuple(argv)


def _controller_ports_and_database(options: UpOptions) -> tuple[tuple[int, ...], PostgresPlan | None, str]:
    """The controllers' ports; the PostgreSQL server to start for them, if any; their database URL."""
    count = options.controllers
    if count < 1:
        raise CliError(f"--controllers {count}: a cluster needs at least one controller")
    default_db = f"sqlite:///{options.state_dir / 'corral.db'}"
    if count == 1:
        return (options.port,), None, options.db_url or default_db
    # The PostgreSQL server started without --db takes the number after the controllers' to name its socket.
    last_port = options.port + count - (0 if options.db_url is None else 1)
    if last_port > 65535:
        raise CliError(f"--controllers {count} from --port {options.port} would need ports up to {last_port}: "
                       "choose a lower --port")
    ports = tuple(range(options.port, options.port + count))
    if options.db_url is not None:
        if not options.db_url.startswith("postgresql"):
            raise CliError(f"--controllers {count} needs a database they can share: --db must be a PostgreSQL "
                           "URL (postgresql+psycopg://...), or leave --db out to have one started")
        return ports, None, options.db_url
    user = _user_name()
    postgres = PostgresPlan(postgres_data_dir(options.state_dir, options.port, os.geteuid(), options.cluster_id),
                            last_port, user)
    return ports, postgres, postgres.url


def _user_name() -> str:
    import pwd

    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        raise CliError("PostgreSQL lets in users by name, and this user has none (no passwd entry): give "
                       "--db postgresql+psycopg://USER@HOST/DB") from None


def _auth_socket(state_dir: Path, port: int, controllers: int) -> Path:
    path = auth_socket_path(state_dir, port, os.geteuid())
    if controllers > 1 and os.geteuid() != 0:  # one per controller in the one state dir
        return path.with_name(f"auth-{port}.sock")
    return path


def auth_socket_path(state_dir: Path, port: int, euid: int) -> Path:
    """Root's cluster serves every user of the host: a world-reachable directory, one per port (so two
    clusters on one host never share it). Another user's cluster serves only that user (its state dir)."""
    return Path(f"/run/corral/{port}/auth.sock") if euid == 0 else state_dir / "auth.sock"


def spool_dir(state_dir: Path, node: str, port: int, euid: int, cluster_id: str | None = None) -> Path:
    """Where a node's agent keeps batch scripts and its task record. Root's agents run each job as its
    user, who must reach their own script (as under slurmd's /var/spool/slurmd): a world-traversable
    directory, one per cluster (by its id; by port for a cluster without one); the job directories in it
    are the users' own and 0700."""
    if euid != 0:
        return state_dir / "spool" / node
    return Path(f"/var/spool/corral/cluster-{cluster_id}/{node}" if cluster_id else f"/var/spool/corral/{port}/{node}")


def image_cache_dir(state_dir: Path, port: int, euid: int, cluster_id: str | None = None) -> Path:
    """The cluster's container image cache (decision 0020), which its nodes' agents share (an image is
    imported once per host, not once per simulated node; leases carry the node's name). One per cluster, as
    its spools are: two clusters on one host never evict or lease each other's images. Root's beside its
    spools, not in the state dir: the jobs' users run runc on the image's root, and root's state dir is
    0700; another user's in its state dir, as its jobs run as that user."""
    return spool_dir(state_dir, "images", port, euid, cluster_id)


def _controller_argv(python: str, options: UpOptions, port: int, db_url: str, secret_file: Path, auth_socket: Path,
                     tls_dir: Path | None, advertise_url: str | None) -> tuple[str, ...]:
    listen = f"[{options.host}]:{port}" if ":" in options.host else f"{options.host}:{port}"
    argv = [python, "-m", "corral.controller", "--listen", listen, "--db", db_url,
            "--secret-file", str(secret_file), "--state-dir", str(options.state_dir), "--auth-socket", str(auth_socket)]
    if advertise_url is not None:
        argv += ["--advertise-url", advertise_url]
    if options.config is not None:
        argv += ["--config", str(options.config)]
    if tls_dir is not None:
        _, cert, key = tls_files(tls_dir)
        argv += ["--tls-cert", str(cert), "--tls-key", str(key)]
    return tuple(argv)


def _agent_argv(python: str, url: str, secret_file: Path, name: str, gpus: int | None,
                node_size: tuple[int, int], spool: Path, tls_dir: Path | None,
                images: Path) -> tuple[str, ...]:
    cpus, mem_mib = node_size
    argv = [python, "-m", "corral.agent", "--controller", url, "--secret-file", str(secret_file),
            "--node", name, "--image-cache", str(images),
            "--cpus", str(cpus), "--mem-mib", str(mem_mib), "--spool", str(spool),
            # The agents are the cluster's: when `corral up` goes, even killed outright (its children get
            # SIGTERM then), their tasks go with them.
            "--kill-tasks-on-exit",
            # On the controller's host, started by whoever started it: root's jobs (the README's own
            # `sbatch` as root) run, as Slurm runs them; the controller takes them only from root here.
            "--allow-root-jobs"]
    if gpus is not None:
        argv += ["--gpus", str(gpus)]
    if tls_dir is not None:
        argv += ["--ca-file", str(tls_files(tls_dir)[0])]
    return tuple(argv)
