"""`python -m corral.agent`: start a node agent.

SIGTERM and SIGINT stop the agent (it stops polling and reporting) but leave running tasks alone, like a
slurmd restart: each task is its own session, with a leader that records its exit, so it survives the
agent. A restarted agent adopts them again (decision 0015) and kills only what it cannot adopt. With
--kill-tasks-on-exit (what `corral up` starts its agents with) the agent kills its tasks when it stops,
so none outlives it.
"""
from __future__ import annotations

import argparse
import asyncio
import dataclasses
import fcntl
import logging
import os
import re
import signal
import sys
from pathlib import Path

from corral.agent.agent import Agent
from corral.agent.auth_socket import remove_cluster_file, write_cluster_file
from corral.agent.cgroups import (
    CgroupError,
    CgroupTree,
    CgroupTreeTaken,
    default_pids_max,
    default_root,
    delegated_root,
    tree_name,
)
from corral.agent.container_runtime import RUNTIME_TOOLS
from corral.agent.container_tasks import DEFAULT_CACHE_LIMIT_BYTES, ContainerSupport
from corral.agent.discovery import DiscoveryError, Inventory, discover
from corral.agent.health import HealthConfig
from corral.agent.identity import agent_user
from corral.agent.leaders import LEADER_PROGRAM
from corral.agent.tasks import Confinement
from corral.agent.usage import DEFAULT_INTERVAL_S, MIN_INTERVAL_S, GpuReader, UsageMonitor
from corral.container_options import RUNTIME_FEATURE
from corral.hostaddr import address_towards
from corral.hostlist import HostlistError, check_node_name
from corral.protocol import check_cluster_id
from corral.slurm.common.commands_dir import slurm_commands_dir
from corral.slurm.common.target import TargetError, parse_urls
from corral.unix_auth_socket import SocketTaken

log = logging.getLogger("corral.agent")
SYSTEM_SPOOL = Path("/var/spool/corral")


def default_spool_dir(node: str, run_as_user: bool = False, cluster_id: str | None = None) -> Path:
    """Where batch scripts and the task record go: /var/spool/corral for an agent that runs tasks as their
    users (each user must reach their script, as under slurmd's /var/spool/slurmd), else the agent user's;
    agent-<cluster>-<node> there, or agent-<node> without a cluster id."""
    name = f"agent-{cluster_id}-{node}" if cluster_id else f"agent-{node}"
    if run_as_user:
        return SYSTEM_SPOOL / name
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state_home) / "corral" / name


class SpoolTaken(Exception):
    """Another running agent records its tasks in the spool: starting would kill them as leftovers."""


def claim_spool(spool: Path) -> int:
    """Lock the spool for this process's life (flock on SPOOL/agent.lock; the descriptor is returned to be
    kept open): a starting agent kills the recorded tasks it cannot adopt, so it must be the spool's only
    agent."""
    spool.mkdir(parents=True, exist_ok=True)
    fd = os.open(spool / "agent.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SpoolTaken(f"the spool {spool} is another running agent's: each agent needs its own "
                         "(give each cluster its own --cluster-id, or --spool)") from None
    return fd


def _node_name(text: str) -> str:
    try:
        return check_node_name(text)
    except HostlistError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _features(text: str) -> tuple[str, ...]:
    features = tuple(f for f in text.split(",") if f)
    for feature in features:
        if not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,64}", feature):
            raise argparse.ArgumentTypeError(f"invalid feature {feature!r}: letters, digits and _.:+- only "
                                             f"(&, | and brackets belong to --constraint)")
    return features


def _cluster_id(text: str) -> str:
    try:
        return check_cluster_id(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _controller_urls(text: str) -> tuple[str, ...]:
    try:
        return parse_urls(text, "--controller")
    except TargetError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m corral.agent", description="corral node agent")
    parser.add_argument("--controller", required=True, type=_controller_urls, metavar="URL[,URL...]",
                        help="controller URL, e.g. http://head:6817; with several controllers, all of their "
                        "URLs, comma-separated (the agent talks to their leader)")
    parser.add_argument("--secret-file", required=True, type=Path,
                        help="file holding this node's agent credential (`corral up` writes one per node; "
                             "or the cluster secret)")
    parser.add_argument("--ca-file", default=None, type=Path, metavar="PEM",
                        help="CA certificate(s) that verify an https:// controller (default: the system's CAs); "
                        "its jobs get it as CORRAL_CA_FILE")
    parser.add_argument("--node", required=True, type=_node_name, help="this node's name in the cluster")
    parser.add_argument("--feature", type=_features, default=(), metavar="A,B",
                        help="this node's features, which sbatch --constraint matches (Slurm's Features=); the "
                        "GPU model's type (e.g. a100) is added by the controller")
    parser.add_argument("--no-containers", action="store_true",
                        help="run no containers here even where runc and uidmap are installed (the node then lacks "
                        "the feature runc, which jobs with --container-image need)")
    parser.add_argument("--image-cache", type=Path, default=None, metavar="DIR",
                        help="where container images are imported (default: the spool's images/)")
    parser.add_argument("--image-cache-limit", type=_image_cache_limit, default=DEFAULT_CACHE_LIMIT_BYTES,
                        metavar="SIZE", help="the image cache's size limit, e.g. 20G (default); the least "
                        "recently used images not in use are evicted beyond it")
    parser.add_argument("--insecure-registry", type=_registries, action="extend", default=[],
                        metavar="HOST[:PORT][,...]",
                        help="registries this node pulls container images from over plain HTTP (no TLS), e.g. a "
                        "registry on the cluster's own network; repeatable (default: none, every pull uses TLS)")
    parser.add_argument("--cluster-id", type=_cluster_id, default=None, metavar="ID",
                        help="the cluster's id on this host (lower-case letters and digits), in the names of "
                        "what the agent makes here (cgroups, spool), so that agents of several clusters on one "
                        "host, named alike, never touch each other's jobs (`corral up` gives one; default: none)")
    parser.add_argument("--address", default=None,
                        help="address other nodes reach this one at: MASTER_ADDR of the jobs it is the first "
                        "node of (default: this host's address on its route to the controller)")
    parser.add_argument("--gpus", type=int, default=None, metavar="N",
                        help="simulate N GPUs instead of reading them from NVML")
    parser.add_argument("--cpus", type=int, default=None, metavar="N", help="CPUs to offer (default: all)")
    parser.add_argument("--mem-mib", type=int, default=None, metavar="N",
                        help="memory to offer in MiB (default: all)")
    parser.add_argument("--spool", type=Path, default=None,
                        help="directory for job scripts and the record of running tasks "
                        "(default: /var/spool/corral/agent-[ID-]NODE when tasks run as their users, else "
                        "$XDG_STATE_HOME/corral/agent-[ID-]NODE, ID the --cluster-id)")
    parser.add_argument("--kill-tasks-on-exit", action="store_true",
                        help="kill the running tasks when the agent stops (default: leave them running)")
    parser.add_argument("--cgroup-root", type=Path, default=None, metavar="DIR",
                        help="cgroup v2 directory under which each job gets its cgroup; the v1 hierarchies "
                        "the host mounts for what v2 lacks get one of the same name (default: corral-[ID-]NODE in "
                        "the cgroup2 mount, /sys/fs/cgroup or /sys/fs/cgroup/unified, ID the --cluster-id)")
    parser.add_argument("--no-cgroups", action="store_true", help="do not put jobs in cgroups")
    parser.add_argument("--pids-max", type=int, default=None, metavar="N",
                        help="how many processes and threads each job may have at once on this node (cgroup "
                        "pids.max; 0: no limit; default: 15%% of the kernel's pid_max, as systemd's "
                        "DefaultTasksMax)")
    parser.add_argument("--gpu-device-dir", type=Path, default=None, metavar="DIR",
                        help="with --gpus N: the simulated GPUs' device files are DIR/nvidia0..N-1, denied to "
                        "the jobs not holding them (tests of device confinement; real GPUs' come from NVML)")
    parser.add_argument("--tasks-as-agent-user", action="store_true",
                        help="development mode: run every task as the agent's user even when it is root "
                        "(by default a root agent runs each task as the job's user)")
    parser.add_argument("--allow-root-jobs", action="store_true",
                        help="run jobs whose user is root (uid 0) here; by default a root agent refuses them "
                        "(the task fails before it starts, with the reason). `corral up` allows them on its "
                        "own agents (docs/security.md)")
    parser.add_argument("--auth-socket", default=None, type=Path, metavar="PATH",
                        help="serve this host's users a credential from the controller on this Unix socket: the "
                        "kernel names the caller, the agent vouches for them (docs/security.md); default: none")
    parser.add_argument("--cluster-file", default=None, type=Path, metavar="PATH",
                        help="with --auth-socket: write the host's cluster.json here (the controller's URL and "
                        "the socket; /etc/corral/cluster.json lets every user find them), removed at exit")
    health = parser.add_argument_group("health checks (a failing one drains the node and requeues its jobs)")
    health.add_argument("--health-program", type=_program, default=None, metavar="PATH",
                        help="the operator's health-check program (e.g. /usr/sbin/nhc), as Slurm's "
                        "HealthCheckProgram: run when the agent starts and every --health-interval; a non-zero "
                        "exit drains the node, its last output line the reason")
    health.add_argument("--health-interval", type=_seconds, default=300.0, metavar="SECONDS",
                        help="between runs of the program (default 300; 0: only at start and before jobs)")
    health.add_argument("--health-timeout", type=_seconds, default=60.0, metavar="SECONDS",
                        help="a run of the program that takes longer is killed and fails (default 60)")
    health.add_argument("--health-before-job", action="store_true",
                        help="also run the program before each job starts here; if it fails the job goes "
                        "back to the queue")
    health.add_argument("--nvml-health-interval", type=_seconds, default=60.0, metavar="SECONDS",
                        help="GPUs from NVML: between polls of their ECC, retired-page, remapped-row and "
                        "NVLink error counters, besides watching critical XIDs (default 60; 0: neither)")
    parser.add_argument("--acctg-freq", type=_acctg_freq, default=DEFAULT_INTERVAL_S, metavar="SECONDS",
                        help="sample each job's CPU, memory and GPUs this often (Slurm's "
                        f"JobAcctGatherFrequency; default {DEFAULT_INTERVAL_S:.0f}, at least {MIN_INTERVAL_S:.0f}); "
                        "a job's --acctg-freq overrides it")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def _program(text: str) -> Path:
    path = Path(text).absolute()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise argparse.ArgumentTypeError(f"{text} is not an executable file")
    return path


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 86400 * 7:
        raise argparse.ArgumentTypeError(f"{text} is outside 0..604800 seconds")
    return value


def health_config(args: argparse.Namespace) -> HealthConfig:
    return HealthConfig(program=args.health_program, interval_s=args.health_interval,
                        timeout_s=args.health_timeout, before_job=args.health_before_job,
                        nvml_interval_s=args.nvml_health_interval)


def _acctg_freq(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not MIN_INTERVAL_S <= seconds <= 86400:
        raise argparse.ArgumentTypeError(f"{text} is outside {MIN_INTERVAL_S:.0f}..86400 seconds")
    return seconds


def read_secret(path: Path) -> str | None:
    """The secret on the file's first line, or None if the file is missing, unreadable or empty."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    secret = lines[0].strip() if lines else ""
    return secret or None


def task_variables(controllers: tuple[str, ...], spool: Path, ca_file: str | None) -> dict[str, str]:
    """What this agent gives every task besides the job's own environment: where the controller is (at
    the agent's URL, so from this node), the CA that verifies it, and the directory of corral's Slurm
    commands (put first on the task's PATH). Nothing of the agent's own environment: variables set only
    for the agent (a proxy password, cloud keys, its credential's file) never reach a job, as slurmd
    builds a task's environment from the job's alone. Jobs reach the controller with their own credential
    (the launch's CORRAL_TOKEN, the job's user's while the job is active), never with the agent's."""
    return {"CORRAL_URL": ",".join(controllers), "CORRAL_SLURM_BIN": slurm_commands_dir(spool), **_ca_env(ca_file)}


async def serve(agent: Agent, kill_tasks_on_exit: bool = False) -> None:
    """Run the agent until SIGTERM or SIGINT."""
    main_task = asyncio.current_task()
    assert main_task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, main_task.cancel)
    try:
        await agent.run()
    except asyncio.CancelledError:
        if not kill_tasks_on_exit:
            log.info("stopping; running tasks are left alone")
            return
        log.info("stopping; killing the running tasks")
        await agent.kill_recorded_tasks("the agent stops (--kill-tasks-on-exit)")


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Options that contradict each other or are out of range: the parser's error (exit 2) before anything runs."""
    if args.cluster_file and not args.auth_socket:
        parser.error("--cluster-file needs --auth-socket: the file tells the host's users where the socket is")
    if args.health_before_job and args.health_program is None:
        parser.error("--health-before-job needs --health-program: it is the program that runs before jobs")
    if args.pids_max is not None and args.pids_max < 0:
        parser.error("--pids-max must be 0 (no limit) or more")
    if args.health_timeout <= 0:
        parser.error("--health-timeout must be more than 0 seconds")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    secret = read_secret(args.secret_file)
    if secret is None:
        parser.error(f"secret file {args.secret_file} is missing, unreadable or empty")
    check_options(parser, args)
    if problem := leader_program_problem():
        print(f"corral agent: {problem}", file=sys.stderr)
        return 1
    ca_file = str(args.ca_file.absolute()) if args.ca_file else None
    if args.controller[0].startswith("https:"):
        from corral.tls_client import TlsConfigError, client_context

        try:
            client_context(ca_file)
        except TlsConfigError as exc:
            parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.log_level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per long poll is noise
    try:
        inventory = discover(args.gpus, cpus=args.cpus, mem_mib=args.mem_mib)
    except DiscoveryError as exc:
        print(f"corral agent: {exc}", file=sys.stderr)
        return 1
    log.info("node %s: %d GPU(s) (%s), %d CPUs, %d MiB", args.node, len(inventory.gpus), inventory.source,
             inventory.cpus, inventory.mem_mib)
    try:
        address = args.address or address_towards(args.controller[0])
    except OSError as exc:
        print(f"corral agent: cannot tell this host's address towards {args.controller[0]} ({exc}): "
              "give it with --address", file=sys.stderr)
        return 1
    try:
        confinement, cgroups_status = confinement_from(args, gpu_device_files(args, inventory))
        spool = args.spool or default_spool_dir(args.node, confinement.run_as_user, args.cluster_id)
        claim_spool(spool)  # held open until the process exits
    except (CgroupTreeTaken, SpoolTaken) as exc:
        print(f"corral agent: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"corral agent: cannot lock the spool: {exc}", file=sys.stderr)
        return 1
    confinement, features = with_containers(args, confinement, spool, gpu_device_files(args, inventory))
    agent = Agent(
        controller_url=args.controller,
        secret=secret,
        node=args.node,
        inventory=inventory,
        spool_dir=spool,
        address=address,
        ca_file=ca_file,
        base_env=task_variables(args.controller, spool, ca_file),
        confinement=confinement,
        cgroups_status=cgroups_status,
        features=features,
        auth_socket=str(args.auth_socket.absolute()) if args.auth_socket else None,
        health=health_config(args),
        usage=UsageMonitor(args.acctg_freq, GpuReader() if inventory.source == "nvml" else None),
    )
    return run_agent(agent, args, ca_file, confinement.cgroups)


def leader_program_problem(program: Path = LEADER_PROGRAM) -> str | None:
    """Why the native task leader (decision 0022) cannot start, or None. Checked before the agent starts:
    without it every task would fail, each draining the node."""
    if program.is_file() and os.access(program, os.X_OK):
        return None
    state = "is not executable" if program.exists() else "is missing"
    return (f"the task leader {program} {state}, so no task could start: in a source checkout build it with "
            "`make venv`; `pip install .` and a wheel built by `pip wheel .` carry it (building them needs a C "
            "compiler)")


def run_agent(agent: Agent, args: argparse.Namespace, ca_file: str | None, tree: CgroupTree | None = None) -> int:
    """Serve until stopped; the host's cluster.json (--cluster-file) names the agent's socket meanwhile.
    With --kill-tasks-on-exit the cgroup tree, emptied, goes too."""
    socket_path = str(args.auth_socket.absolute()) if args.auth_socket else None
    cluster_file = args.cluster_file if socket_path else None
    if cluster_file and socket_path:
        try:
            other = write_cluster_file(cluster_file, args.controller, socket_path, ca_file)
            if other is not None:
                log.warning("%s is kept: it serves the cluster at %s, still running here; this node's users find "
                            "this cluster with CORRAL_URL=%s", cluster_file, other, ",".join(args.controller))
        except OSError as exc:
            print(f"corral agent: cannot write {cluster_file}: {exc}", file=sys.stderr)
            return 1
    try:
        asyncio.run(serve(agent, args.kill_tasks_on_exit))
        if args.kill_tasks_on_exit and tree is not None:
            tree.release()
    except SocketTaken as exc:
        print(f"corral agent: {exc}", file=sys.stderr)
        return 1
    finally:
        if cluster_file and socket_path:
            remove_cluster_file(cluster_file, socket_path)
    return 0


def _image_cache_limit(text: str) -> int:
    from corral.jobscript.errors import DirectiveError
    from corral.jobscript.units import parse_mem_mib

    try:
        return parse_mem_mib(text) << 20
    except DirectiveError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _registries(text: str) -> list[str]:
    from corral.agent.image_registry import check_registry_host

    try:
        return [check_registry_host(host) for host in text.split(",") if host]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def gpu_device_files(args: argparse.Namespace, inventory: Inventory) -> dict[int, Path]:
    """Each GPU's device file: NVML's, or DIR/nvidiaN for simulated GPUs given --gpu-device-dir."""
    if args.gpu_device_dir is not None:
        return {gpu.index: args.gpu_device_dir / f"nvidia{gpu.index}" for gpu in inventory.gpus}
    return {index: Path(path) for index, path in enumerate(inventory.device_files)}


def confinement_from(args: argparse.Namespace, device_files: dict[int, Path]) -> tuple[Confinement, str]:
    """How tasks will be confined, each limitation said once in the log; and the registration's line."""
    run_as_user = os.geteuid() == 0 and not args.tasks_as_agent_user
    if not run_as_user:
        log.warning("development mode: every task runs as %s, the agent's user, whoever submitted it",
                    agent_user())
    tree: CgroupTree | None = None
    if args.no_cgroups:
        status = "cgroups off (--no-cgroups)"
    else:
        try:
            tree = _cgroup_tree(args, device_files)
            status = tree.describe()
        except CgroupTreeTaken:
            raise  # never to run beside its jobs, killing them as leftovers
        except (CgroupError, OSError) as exc:
            status = f"no cgroups: {exc}"
    (log.info if tree is not None else log.warning)("task isolation: %s", status)
    return Confinement(run_as_user=run_as_user, cgroups=tree, allow_root_jobs=args.allow_root_jobs), status



def with_containers(args: argparse.Namespace, confinement: Confinement, spool: Path,
                    device_files: dict[int, Path]) -> tuple[Confinement, list[str]]:
    """The node's container support (decision 0020) and its features: `runc` when it can run containers."""
    features = list(args.feature)
    if args.no_containers:
        log.info("containers: off (--no-containers)")
        return confinement, features
    support = ContainerSupport.detect(args.image_cache or spool / "images", args.image_cache_limit, device_files,
                                      frozenset(args.insecure_registry))
    if support is None:
        log.info("containers: none (%s not all installed)", ", ".join(RUNTIME_TOOLS))
        return confinement, features
    log.info("containers: runc, images cached in %s (at most %d MiB)%s", support.cache.directory,
             support.cache.limit_bytes >> 20,
             f", plain-HTTP registries: {', '.join(sorted(args.insecure_registry))}" if args.insecure_registry else "")
    if RUNTIME_FEATURE not in features:
        features.append(RUNTIME_FEATURE)
    return dataclasses.replace(confinement, containers=support), features


def _cgroup_tree(args: argparse.Namespace, device_files: dict[int, Path]) -> CgroupTree:
    """The agent's tree, claimed: at --cgroup-root; for root, in the host's cgroup mount; for another user,
    under its own cgroup where that is delegated to the user (never in root's: CgroupError says why)."""
    root = args.cgroup_root
    if root is None and os.geteuid() != 0:
        root = delegated_root(args.node, args.cluster_id)
        if root is None:
            raise CgroupError("the agent is not root, and its own cgroup is not delegated to its user (run it in "
                              "one that is, e.g. systemd-run --user --scope -p Delegate=yes, or give "
                              "--cgroup-root)")
    root = root or default_root(args.node, args.cluster_id)
    tree = CgroupTree.open(root, tree_name(args.node, args.cluster_id) if root is None else None, device_files,
                           pids_max=default_pids_max() if args.pids_max is None else args.pids_max)
    tree.claim()
    return tree


def _ca_env(ca_file: str | None) -> dict[str, str]:
    """CORRAL_CA_FILE for the jobs, so that their Slurm commands verify the controller as the agent does."""
    return {"CORRAL_CA_FILE": ca_file} if ca_file else {}


if __name__ == "__main__":
    sys.exit(main())
