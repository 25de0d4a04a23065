"""`corral ray`: a Ray cluster on an allocation, its dashboard and job API through the gateway, its owner's.

It applies a session service of N nodes (cli/ray_spec.py: the head on the first node, a Ray node on each
other, each with its node's share of the job), makes a credential for the user's browser and Ray's job
client that expires with the session (an API token: `corral token list` shows it), waits until the
dashboard answers through the gateway, and prints its URL and the `ray job submit` line. The gateway lets
only the owner in (another user gets 403) and sends Ray the session's secret, Ray's token, in place of the
user's credential. The Ray cluster ends with its allocation: its time limit, `corral cancel JOB` or
`corral service delete NAME`. One that ends before it is up ('ray' not found on a node, a crash) is
reported with the last lines of its log, and the token is revoked: nothing is left behind."""
from __future__ import annotations

import os
import secrets
import time
from typing import Annotated

import typer

from corral.api.notebooks import gateway_path, user_label
from corral.cli.connect import open_client
from corral.cli.jobs import UrlOption
from corral.cli.notebook import _gateway_url, _undo, wait_session_replica
from corral.cli.output import reported_errors
from corral.cli.ray_spec import NODES_PATH, job_submit_line, ray_session_spec
from corral.jobscript.units import parse_time_s

POLL_S = 0.5


def ray(
    nodes: Annotated[int, typer.Option("--nodes", "-N", min=1, help="Nodes: the head on the first, a Ray node "
                                       "on each.")] = 1,
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", min=0, help="GPUs of each node, all given to "
                                               "its Ray node.")] = 0,
    cpus_per_node: Annotated[int, typer.Option("--cpus-per-node", min=1, help="CPUs of each node, all given to "
                                               "its Ray node.")] = 1,
    time_limit: Annotated[str, typer.Option("--time", "-t", help="Its time limit (Slurm's forms: 4:00:00, "
                                            "1-00:00:00): the Ray cluster ends with it.")] = "4:00:00",
    name: Annotated[str | None, typer.Option("--name", help="Its name, which is also its gateway path /s/NAME/ "
                                             "(a DNS label). Default: ray-USER-XXXX.", show_default=False)] = None,
    object_store_mib: Annotated[int | None, typer.Option("--object-store-mib", min=75, help="Ray's object store "
                                                         "on each node (default: Ray's own, 30% of memory).",
                                                         show_default=False)] = None,
    partition: Annotated[str | None, typer.Option("--partition", "-p", help="Its partition (default: the "
                                                  "cluster's).", show_default=False)] = None,
    account: Annotated[str | None, typer.Option("--account", "-A", help="The account it is charged to "
                                                "(default: yours).", show_default=False)] = None,
    qos: Annotated[str | None, typer.Option("--qos", "-q", help="Its QOS.", show_default=False)] = None,
    gateway: Annotated[str | None, typer.Option("--gateway", help="The gateway's URL, as your browser and Ray's "
                                                "job client reach it. Default: $CORRAL_GATEWAY, else the cluster's "
                                                "[gateway] url.",
                                                show_default=False)] = None,
    wait_s: Annotated[float, typer.Option("--wait-s", min=0, help="How long to wait, once the allocation runs, "
                                          "for every Ray node to join.")] = 300.0,
    url: UrlOption = None,
) -> None:
    """Start a Ray cluster on an allocation; print its dashboard's URL and the `ray job submit` line (through
    the gateway, for you alone)."""
    with reported_errors():
        limit_s = parse_time_s(time_limit)
        with open_client(url) as client:
            base = _gateway_url(gateway, client)
            user = client.whoami()["name"]
            session = name or f"ray-{user_label(user)}-{secrets.token_hex(2)}"
            spec = ray_session_spec(name=session, workdir=os.getcwd(), nodes=nodes, gpus_per_node=gpus_per_node,
                                    cpus_per_node=cpus_per_node, time_limit_s=limit_s,
                                    object_store_mib=object_store_mib, partition=partition, account=account,
                                    qos=qos, environ=os.environ)
            client.apply_service(spec)
            token = client.create_token({"expires_s": limit_s + 3600, "description": f"ray {session}"})
            try:
                job = wait_session_replica(client, session, f"Ray cluster {session}", "up", "corral ray:")
            except BaseException:
                _undo(client, session, token["id"])
                raise
    joined = _wait_joined(f"{base}{gateway_path(session)}{NODES_PATH}", token["token"], nodes, wait_s)
    if joined:
        typer.echo(f"corral: after {wait_s:g} s, {joined}; see {session}-{job['job_id']}.out", err=True)
    typer.echo(f"Ray cluster {session}: job {job['job_id']}, head on {job.get('node') or '?'}, a Ray node on "
               f"each of {nodes} node(s); it ends with the job (its time limit, {time_limit}, or "
               f"'corral cancel {job['job_id']}')")
    typer.echo(f"dashboard: {base}{gateway_path(session)}?corral_token={token['token']}")
    typer.echo(f"submit: {job_submit_line(base, session, token['token'])}")


def _wait_joined(url: str, token: str, nodes: int, wait_s: float) -> str:
    """"" once Ray's state API, through the gateway, lists `nodes` live Ray nodes; else what it last said
    (the gateway not routing yet, fewer nodes: one still starting, or started again after a failed start)."""
    import httpx

    deadline, last = time.monotonic() + wait_s, "no answer yet"
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10, trust_env=False)
            if reply.status_code == 200:
                alive = sum(1 for node in reply.json()["data"]["result"]["result"] if node.get("state") == "ALIVE")
                if alive >= nodes:
                    return ""
                last = f"{alive} of {nodes} Ray nodes have joined"
            else:
                last = f"the gateway answers HTTP {reply.status_code}"
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            last = f"no answer through the gateway ({exc or type(exc).__name__})"
        time.sleep(POLL_S * 2)
    return last
