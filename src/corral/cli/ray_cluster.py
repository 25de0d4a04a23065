"""`corral ray`: a Ray cluster on an allocation.

It submits a batch job whose script (RAY_SCRIPT) starts the Ray head on the job's first node and one
Ray node per other node, each as an `srun -w NODE` step holding that node's share of the job (its GPUs
and CPUs), then waits: the Ray cluster lives exactly as long as the allocation (time limit, `corral
cancel`). Ray runs from the user's own environment (`ray` on PATH on the nodes, e.g. `pip install
'corral[ray]'`); corral never imports it. Each Ray node also offers a custom resource named after its
corral node (`{"node2": 1}`), so a program can pin work to a node.

The Ray cluster only obeys its owner: the script turns on Ray's token authentication (RAY_AUTH_MODE=token)
with a fresh random token, written 0600 to `ray-<job>.token` beside the output file and handed to every
Ray node through the steps' environment. Without it, anyone who can reach the dashboard port could run
code as the user through the job-submission API.

Ports are not fixed: the script picks free ones on the head node (two Ray clusters, or two Ray nodes
of one test cluster, can share a host), and the head's temp dir is per job. The script prints
`RAY_ADDRESS=http://HEAD:PORT` (the dashboard and job-submission API) into the job's output file
once the head answers; `corral ray` waits for that line and prints it."""
from __future__ import annotations

import io
import os
import re
import shlex
import time
from pathlib import Path

import typer

from corral.cli.errors import CliError
from corral.cli.output import reported_errors

ADDRESS_LINE = re.compile(r"^RAY_ADDRESS=(\S+)$", re.MULTILINE)
FAILURE_LINE = re.compile(r"^corral ray: (.+)$", re.MULTILINE)
ENDED_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE"}
POLL_S = 1.0

# The batch script. {gpus} and {cpus} are the per-node sizes `corral ray` asked for; everything else
# comes from the job's environment on the head node.
RAY_SCRIPT = r"""#!/bin/bash
set -u
fail() {{ echo "corral ray: $*" >&2; echo "corral ray: $*"; exit 2; }}
command -v ray >/dev/null || fail "'ray' is not on PATH on $(hostname) (pip install 'corral[ray]' or 'ray[default]')"
free_port() {{ python3 -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }}
answers() {{  # HOST PORT: whether something accepts connections there
  python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)' "$1" "$2" 2>/dev/null
}}

umask 077
token_file={token_file}
python3 -c 'import secrets; print(secrets.token_hex(32))' > "$token_file" || fail "cannot write $token_file"
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN="$(cat "$token_file")"

nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
head=${{nodes[0]}}
head_ip=$(python3 -c 'import socket, sys; print(socket.gethostbyname(sys.argv[1]))' "$head") \
  || fail "cannot resolve the head node's name $head"
gcs_port=$(free_port)
dashboard_port=$(free_port)
temp_dir=/tmp/corral-ray-$SLURM_JOB_ID
ray_node() {{  # NODE ARGS...: one Ray node as a step on NODE, with that node's share of the job
  local node=$1; shift
  srun --nodes=1 --ntasks=1 -w "$node" ray start --block --num-cpus {cpus} --num-gpus {gpus} \
    --resources "{{\"$node\": 1}}" "$@" &
}}

ray_node "$head" --head --node-ip-address="$head_ip" --port="$gcs_port" --temp-dir="$temp_dir" \
  --dashboard-host=0.0.0.0 --dashboard-port="$dashboard_port" --include-dashboard=true
for _ in $(seq 120); do answers "$head_ip" "$gcs_port" && break; sleep 1; done
answers "$head_ip" "$gcs_port" || fail "the Ray head on $head did not answer on port $gcs_port within 120 s"
for node in "${{nodes[@]:1}}"; do
  ray_node "$node" --address="$head_ip:$gcs_port"
done
for _ in $(seq 120); do answers "$head_ip" "$dashboard_port" && break; sleep 1; done
answers "$head_ip" "$dashboard_port" || fail "the Ray dashboard on $head did not answer within 120 s"
echo "RAY_HEAD=$head_ip:$gcs_port"
echo "RAY_ADDRESS=http://$head_ip:$dashboard_port"
wait
"""


def ray_script(gpus_per_node: int, cpus_per_node: int, token_file: str) -> str:
    """`token_file`: where the Ray token goes, `%j` standing for the job id."""
    return RAY_SCRIPT.format(gpus=gpus_per_node, cpus=cpus_per_node,
                             token_file='"$SLURM_JOB_ID"'.join(shlex.quote(part) for part in token_file.split("%j")))


def job_tokens(nodes: int, gpus_per_node: int, cpus_per_node: int, time_limit: str, output: str,
               partition: str | None, name: str) -> list[str]:
    if nodes < 1:
        raise CliError(f"--nodes must be at least 1, not {nodes}")
    if gpus_per_node < 0 or cpus_per_node < 1:
        raise CliError("--gpus-per-node must be 0 or more and --cpus-per-node 1 or more")
    tokens = ["--nodes", str(nodes), "--ntasks-per-node", "1", "--cpus-per-task", str(cpus_per_node),
              "--time", time_limit, "--output", output, "--job-name", name]
    if gpus_per_node:
        tokens += ["--gpus-per-node", str(gpus_per_node)]
    if partition:
        tokens += ["--partition", partition]
    return tokens


def wait_for_address(client, job_id: int, output: Path, wait_s: float) -> str:
    """The RAY_ADDRESS line of the job's output, once the head answers; a clear error if the job ends
    first or the wait runs out (the job then keeps running: the user may cancel it)."""
    deadline = time.monotonic() + wait_s
    while True:
        text = output.read_text(errors="replace") if output.exists() else ""
        if found := ADDRESS_LINE.search(text):
            return found.group(1)
        state = client.job(job_id).get("state", "")
        if state in ENDED_STATES:
            why = FAILURE_LINE.search(text)
            raise CliError(f"job {job_id} ended ({state}) before its Ray cluster was up"
                           + (f": {why.group(1)}" if why else f"; see {output}"))
        if time.monotonic() > deadline:
            raise CliError(f"job {job_id} is {state or 'unknown'}: no Ray address after {wait_s:g} s "
                           f"(see {output}; 'corral cancel {job_id}' to give the allocation back)")
        time.sleep(POLL_S)


def ray(
    nodes: int = typer.Option(1, "--nodes", "-N", help="nodes: the head on the first, a Ray node on each"),
    gpus_per_node: int = typer.Option(0, "--gpus-per-node", help="GPUs of each node, all given to its Ray node"),
    cpus_per_node: int = typer.Option(1, "--cpus-per-node", help="CPUs of each node, all given to its Ray node"),
    time_limit: str = typer.Option(..., "--time", "-t", help="time limit: the Ray cluster ends with it"),
    partition: str = typer.Option(None, "--partition", "-p", help="the partition to run in (default: the default one)"),
    name: str = typer.Option("ray", "--job-name", "-J", help="the job's name"),
    output: str = typer.Option("ray-%j.out", "--output", "-o", help="the job's output (Ray's and the address)"),
    wait_s: float = typer.Option(300.0, "--wait-s", help="how long to wait for the Ray cluster to answer"),
    url: str = typer.Option(None, "--url", help="controller URL(s) (default: $CORRAL_URL, then 'corral up')"),
) -> None:
    """Start a Ray cluster on a new allocation and print its RAY_ADDRESS (dashboard and job API)."""
    from corral.cli.connect import open_client
    from corral.cli.submit import build_body, split_command_line

    with reported_errors():
        line = split_command_line(job_tokens(nodes, gpus_per_node, cpus_per_node, time_limit, output,
                                             partition, name))
        out_pattern = Path(os.getcwd()) / output
        token_pattern = out_pattern.parent / "ray-%j.token"
        body = build_body(line, io.StringIO(ray_script(gpus_per_node, cpus_per_node, str(token_pattern))))
        with open_client(url) as client:
            job_id = int(client.submit(body)["job_id"])
            typer.echo(f"Submitted job {job_id}: Ray head on its first node, a Ray node on each of {nodes}")
            out_path = Path(str(out_pattern).replace("%j", str(job_id)).replace("%x", name))
            address = wait_for_address(client, job_id, out_path, wait_s)
    token_path = str(token_pattern).replace("%j", str(job_id))
    typer.echo(f"RAY_ADDRESS={address}")
    typer.echo(f"RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={token_path}")
    typer.echo(f"Submit: export the two lines above, then 'ray job submit -- python my.py'; "
               f"dashboard: {address}/ (docs/ray.md)")
    typer.echo(f"Ends with job {job_id} (its time limit, or 'corral cancel {job_id}').")
