"""What `corral ray` asks for, as data: a session service (api/services.py, `session = true`) of N nodes
whose command starts one Ray node on each. Pure, so its tests need no cluster.

The command is a POSIX shell script, run on every node of the allocation as the user (a session's
replica is a gang: one task per node):
- `ray` missing from the PATH the user submitted with: one clear line, exit 127 (the session ends and
  `corral ray` prints that line);
- Ray's token authentication on, its token being the session's secret (`$CORRAL_SESSION_SECRET`, which
  the controller gives the job and the gateway sends upstream in place of the caller's credential): only
  the gateway's route, owner-only, or whoever holds the job's own environment reaches the Ray cluster;
- the first node (SLURM_NODEID 0) starts the head, with its GCS, dashboard, Ray client and job agent ports
  the ones corral's agent chose there (`$CORRAL_PORT_GCS`, ...: two Ray clusters may share a host); the
  dashboard, the service's first port, is what the gateway routes `/s/<name>/` to, and the replica is
  ready once the head's job agent listens (before that Ray refuses a submitted job);
- every other node asks the controller (with the job's own credential, `$CORRAL_TOKEN`) for the head's
  GCS address, which the head's agent reported, waits until it answers and the head's job agent too (the
  head is then through its burst of start-up work, which on a loaded host starved a joining node's own
  agent past Ray's fixed 15 s), and joins it;
- each Ray node holds its node's share of the job (`--num-cpus`, `--num-gpus`) and a custom resource
  named after its corral node (`{"node2": 1}`), so a program can pin work to a node;
- `ray start --block` is the task: a cancel, the time limit or a preemption stops it (SIGTERM), and it
  stops its Ray processes, so the Ray cluster ends with the allocation."""
from __future__ import annotations

import json
import shlex
from collections.abc import Mapping

from corral.api.notebooks import CARRIED_ENV, gateway_path

DASHBOARD_PORT = "dashboard"  # first: the gateway routes to a replica's first port
# The head node's job agent (Ray's dashboard agent) takes the submitted jobs; it comes up after the
# dashboard, and a job submitted before it is refused ("No available agent"): the replica is ready once it
# listens.
AGENT_PORT = "agent"
# The ports each node's raylet would otherwise learn from files its agents write once they are up; it
# waits 15 s for each (fixed in Ray 2.60) and aborts, which a loaded node misses (seen here at load 12).
# Given on the command line, the raylet does not wait for them.
AGENT_PORTS = {"agent_grpc": "--dashboard-agent-grpc-port", "metrics": "--metrics-export-port",
               "runtime_env": "--runtime-env-agent-port"}
PORTS = (DASHBOARD_PORT, "gcs", "client", AGENT_PORT, *AGENT_PORTS)
HEAD_WAIT_S = 300
AGENT_WAIT_S = 120
START_ATTEMPTS = 3

# `ray start --block ARGS`, again (up to START_ATTEMPTS) when it ends with an error that no stop signal
# caused: on a loaded node a raylet gives up on its agents after a wait fixed at 15 s in Ray 2.60 (their
# port files; seen here at load 10-12) and the node never joins; a second start usually makes it. A stop
# (cancel, time limit, preemption: SIGTERM to this shell) is passed on to `ray start`, which stops its Ray
# processes, and ends the loop.
START_RAY = f"""stopping=
trap 'stopping=1; [ -n "${{ray_pid:-}}" ] && kill -TERM "$ray_pid" 2>/dev/null' TERM INT
start_ray() {{
  attempt=1
  while :; do
    ray start "$@" &
    ray_pid=$!
    wait "$ray_pid"; status=$?
    if [ -n "$stopping" ]; then wait "$ray_pid" 2>/dev/null; exit $?; fi  # its own status, once it stopped
    if [ "$status" = 0 ] || [ "$attempt" -ge {START_ATTEMPTS} ]; then exit "$status"; fi
    echo "corral ray: the Ray node on $node ended with status $status (attempt $attempt of {START_ATTEMPTS});" \\
      "starting it again" >&2
    attempt=$((attempt + 1))
    sleep 5
  done
}}
"""
# Each Ray node's own directory (sessions, logs, sockets, `ray_current_cluster`), made by mktemp: Ray's
# default, /tmp/ray, and any name built from the job's id (another cluster on this host has a job of that id
# too, and another user could make the name first) would be shared. Under /tmp, not $TMPDIR: Ray's sockets
# lie in <dir>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store.N, which takes up to 66 of the 107
# bytes a Unix socket's path may have, so the directory's name may take 41 (this one takes 33 with a
# 10-digit job id). RAY_TMPDIR points Ray's other defaults there too; the directory goes when the node's Ray
# ends.
RAY_DIRECTORY = """ray_dir=$(mktemp -d "/tmp/corral-ray-$SLURM_JOB_ID.XXXXXX") ||
  fail "cannot make Ray's directory under /tmp"
trap 'rm -rf "$ray_dir"' EXIT
export RAY_TMPDIR="$ray_dir"
"""
RAY_DIRECTORY_LONGEST = len("/tmp/corral-ray-4294967295.XXXXXX")
SOCKET_PATH_LIMIT = 107
# Ray's state API: its nodes, each ALIVE once its raylet registered (200 through the gateway, which adds
# Ray's token).
NODES_PATH = "api/v0/nodes?limit=1000"

# Stdlib only (it runs under the user's python3, beside their Ray): the head's GCS address from the
# controller's view of this session, then a wait until it accepts connections.
HEAD_ADDRESS = r"""
import json, os, socket, ssl, sys, time, urllib.request
name, job, wait_s = sys.argv[1], int(os.environ["SLURM_JOB_ID"]), float(sys.argv[2])
urls = [u.rstrip("/") for u in os.environ.get("CORRAL_URL", "").split(",") if u]
ca = os.environ.get("CORRAL_CA_FILE")
context = ssl.create_default_context(cafile=ca) if ca else None
headers = {"Authorization": "Bearer " + os.environ.get("CORRAL_TOKEN", "")}
deadline, last = time.monotonic() + wait_s, "no controller URL (CORRAL_URL)"
while time.monotonic() < deadline:
    for url in urls:
        try:
            request = urllib.request.Request(f"{url}/api/v1/services/{name}", headers=headers)
            with urllib.request.urlopen(request, timeout=5, context=context) as reply:
                replicas = json.load(reply).get("replicas") or []
        except (OSError, ValueError) as exc:
            last = f"{url}: {exc}"
            continue
        ours = next((r.get("endpoints") or {} for r in replicas if r.get("job_id") == job), {})
        if not ours.get("gcs") or not ours.get("agent"):
            last = "the head has not started yet"
            break
        try:
            for address in (ours["gcs"], ours["agent"]):
                host, port = address.rsplit(":", 1)
                socket.create_connection((host, int(port)), 1).close()
        except OSError as exc:
            last = f"the head at {address} does not answer yet ({exc})"
            break
        print(ours["gcs"])
        sys.exit(0)
    time.sleep(1)
sys.exit(f"no Ray head to join after {wait_s:g} s: {last}")
"""


def ray_command(name: str, gpus: int, cpus: int, object_store_mib: int | None) -> list[str]:
    """The replica's command line on every node: the script above."""
    store = f" --object-store-memory={object_store_mib * 1024 * 1024}" if object_store_mib else ""
    script = (
        "set -u\n"
        'fail() { echo "corral ray: $*" >&2; exit 2; }\n'
        "if ! command -v ray >/dev/null 2>&1; then\n"
        "  echo \"corral ray: 'ray' is not on PATH on $(hostname) (PATH=$PATH): install Ray in the environment "
        "you run corral ray from (pip install 'corral[ray]')\" >&2\n"
        "  exit 127\nfi\n"
        '[ -n "${CORRAL_SESSION_SECRET:-}" ] || fail "no session secret from the controller: the Ray cluster '
        'would obey anyone"\n'
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$CORRAL_SESSION_SECRET"\n'
        # Ray gives a node's agents 30 s to register; a loaded node takes longer. The user's setting wins.
        f'export RAY_agent_register_timeout_ms="${{RAY_agent_register_timeout_ms:-{AGENT_WAIT_S * 1000}}}"\n'
        + START_RAY +
        'node=$SLURMD_NODENAME\n'
        + RAY_DIRECTORY +
        "ip=$(python3 -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))' \"$node\") "
        '|| fail "cannot resolve this node\'s name $node"\n'
        f'set -- --block --temp-dir="$ray_dir" --node-ip-address="$ip" --num-cpus {cpus} --num-gpus {gpus}{store} '
        '--dashboard-agent-listen-port="$CORRAL_PORT_AGENT" --resources "{\\"$node\\": 1}"'
        + "".join(f' {option}="$CORRAL_PORT_{name.upper()}"' for name, option in AGENT_PORTS.items()) + "\n"
        'if [ "$SLURM_NODEID" = 0 ]; then\n'
        '  start_ray --head "$@" --port="$CORRAL_PORT_GCS" --ray-client-server-port="$CORRAL_PORT_CLIENT" '
        '--dashboard-host=0.0.0.0 --dashboard-port="$CORRAL_PORT_DASHBOARD" --include-dashboard=true\n'
        "fi\n"
        f"head=$(python3 -c {shlex.quote(HEAD_ADDRESS)} {shlex.quote(name)} {HEAD_WAIT_S}) || exit 2\n"
        'start_ray --address="$head" "$@"\n'
    )
    return ["/bin/sh", "-c", script]


def ray_session_spec(*, name: str, workdir: str, nodes: int, gpus_per_node: int, cpus_per_node: int,
                     time_limit_s: int, object_store_mib: int | None = None, partition: str | None = None,
                     account: str | None = None, qos: str | None = None,
                     environ: Mapping[str, str] | None = None) -> dict:
    """The body of `POST /api/v1/services` for one Ray cluster. Not `keep_prefix`: Ray's dashboard serves
    at / with relative links, so the gateway takes `/s/<name>` off."""
    env = {key: environ[key] for key in CARRIED_ENV if environ and environ.get(key)}
    spec: dict = {
        "name": name, "session": True, "keep_prefix": False, "nodes": nodes,
        "command": ray_command(name, gpus_per_node, cpus_per_node, object_store_mib), "workdir": workdir,
        "env": env, "gpus_per_node": gpus_per_node, "cpus_per_task": cpus_per_node, "time_limit_s": time_limit_s,
        "ports": [{"name": port} for port in PORTS],
        # A loaded node may take seconds to accept: three misses in a row before the gateway stops routing.
        "probes": {"readiness": {"tcp": {"port": AGENT_PORT}, "period_s": 1, "timeout_s": 5,
                                 "failure_threshold": 3}},
    }
    optional = {"partition": partition, "account": account, "qos": qos}
    spec.update({key: value for key, value in optional.items() if value is not None})
    return spec


def job_submit_line(gateway: str, name: str, token: str) -> str:
    """What the user types to run a program on the Ray cluster through the gateway: Ray's job client sends
    RAY_JOB_HEADERS with every request; the gateway checks the corral credential in it, keeps it, and sends
    Ray's token on instead."""
    headers = json.dumps({"Authorization": f"Bearer {token}"})
    address = gateway + gateway_path(name).rstrip("/")
    return (f"RAY_JOB_HEADERS={shlex.quote(headers)} ray job submit --address {address} "
            "--working-dir . -- python my_program.py")
