"""`corral notebook`: JupyterLab on an allocation, reached through the gateway by its owner only.

It applies a session service (api/notebooks.py), makes a credential for the browser that expires with
the session (an API token: `corral token list` shows it), waits until JupyterLab answers, and prints the URL.
The link carries the credential once; the gateway turns it into a cookie on the session's path
(gateway/browser.py). A session that ends before it is ready (JupyterLab not found on the node, a crash)
is reported with the last lines of its log, and the token is revoked: nothing is left behind."""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Annotated

import typer

from corral.api.notebooks import READY_PATH, default_name, gateway_path, gpus_and_share, session_spec
from corral.cli.client import Client, ClientError
from corral.cli.connect import open_client
from corral.cli.errors import CliError
from corral.cli.jobs import UrlOption
from corral.cli.output import reported_errors
from corral.jobscript.units import parse_time_s

POLL_S = 0.5
LOG_LINES = 5
GATEWAY_WAIT_S = 30.0


def notebook(
    gpus: Annotated[int, typer.Option("--gpus", "-G", min=0, help="GPUs for the notebook.")] = 0,
    time_limit: Annotated[str, typer.Option("--time", "-t", help="Its time limit (Slurm's forms: 4:00:00, "
                                            "1-00:00:00); at the limit it is stopped.")] = "4:00:00",
    idle_timeout: Annotated[str | None, typer.Option("--idle-timeout", help="Stop it once its kernels have "
                                                     "been idle and its GPUs under 5% utilisation this long "
                                                     "(Slurm's time forms, 30:00 is 30 minutes); default: only "
                                                     "the time limit stops it.",
                                                     show_default=False)] = None,
    name: Annotated[str | None, typer.Option("--name", help="Its name, which is also its gateway path "
                                             "/s/NAME/ (a DNS label). Default: nb-USER-XXXX.",
                                             show_default=False)] = None,
    gres: Annotated[str | None, typer.Option("--gres", help="gpu:N (as --gpus), or a share of one GPU: shard:N, "
                                             "mps:P (bound by CUDA MPS where the node has it).",
                                             show_default=False)] = None,
    cpus: Annotated[int, typer.Option("--cpus-per-task", "-c", min=1, help="CPUs for it.")] = 1,
    partition: Annotated[str | None, typer.Option("--partition", "-p", help="Its partition (default: the "
                                                  "cluster's).", show_default=False)] = None,
    account: Annotated[str | None, typer.Option("--account", "-A", help="The account it is charged to "
                                                "(default: yours).", show_default=False)] = None,
    qos: Annotated[str | None, typer.Option("--qos", "-q", help="E.g. the low-priority QOS an operator set up "
                                            "for notebooks (docs/services.md).", show_default=False)] = None,
    jupyter: Annotated[str, typer.Option("--jupyter", help="The command that starts JupyterLab on the node, "
                                         "found on your PATH there.")] = "jupyter",
    gateway: Annotated[str | None, typer.Option("--gateway", help="The gateway's URL, as your browser reaches it. "
                                                "Default: $CORRAL_GATEWAY, else the cluster's ([gateway] url).",
                                                show_default=False)] = None,
    url: UrlOption = None,
) -> None:
    """Start JupyterLab on a GPU allocation and print its URL (through the gateway, for you alone)."""
    with reported_errors():
        limit_s = parse_time_s(time_limit)
        idle_s = parse_time_s(idle_timeout) if idle_timeout is not None else None
        gpus, share = _gpus(gpus, gres)
        with open_client(url) as client:
            base = _gateway_url(gateway, client)  # before anything starts: no gateway, nothing started
            user = client.whoami()["name"]
            session = name or default_name(user, secrets.token_hex(2))
            spec = session_spec(name=session, workdir=os.getcwd(), time_limit_s=limit_s, gpus=gpus,
                                jupyter=jupyter, idle_s=idle_s, gpu_share=share, cpus=cpus, partition=partition,
                                account=account, qos=qos, environ=os.environ)
            client.apply_service(spec)
            token = client.create_token({"expires_s": limit_s + 3600, "description": f"notebook {session}"})
            try:
                job = wait_session_replica(client, session, f"notebook {session}", "ready", "corral notebook:")
            except BaseException:
                _undo(client, session, token["id"])
                raise
    routed = _wait_routed(f"{base}{gateway_path(session)}{READY_PATH}", token["token"])
    if routed:
        typer.echo(f"corral: the gateway does not answer for it yet ({routed}); the link may need a moment", err=True)
    typer.echo(f"notebook {session}: job {job['job_id']} on {job.get('node') or '?'}, stops at its time limit "
               f"({time_limit})" + (f" or after {idle_timeout} idle" if idle_timeout else ""))
    typer.echo(f"open: {base}{gateway_path(session)}lab?corral_token={token['token']}")
    typer.echo(f"stop: corral service delete {session}")


def _gpus(gpus: int, gres: str | None) -> tuple[int, str | None]:
    try:
        return gpus_and_share(gpus, gres)
    except ValueError as exc:
        raise CliError(str(exc).replace("give gpus or gres", "give --gpus or --gres")) from None


def _gateway_url(option: str | None, client: Client) -> str:
    value = option or os.environ.get("CORRAL_GATEWAY", "") or client.health().get("gateway_url") or ""
    if not value:
        raise CliError("no gateway: the cluster names none ([gateway] url in its config); pass --gateway "
                       "http://HOST:PORT or set CORRAL_GATEWAY (the URL `corral gateway` serves, as your browser "
                       "reaches it)")
    if not value.startswith(("http://", "https://")):
        raise CliError(f"--gateway {value!r} is not an http:// or https:// URL")
    return value.rstrip("/")


def wait_session_replica(client: Client, session: str, what: str, until: str, marker: str) -> dict:
    """The session's replica once it is ready (`until`: "ready", "up"); CliError with its log when it ended
    first (see ended_early for `what` and `marker`)."""
    while True:
        try:
            service = client.service(session)
        except ClientError as exc:
            if exc.status == 404:
                raise CliError(ended_early(client, session, what, until, marker)) from None
            raise
        replica = next(iter(service.get("replicas") or []), None)
        if replica is not None and replica.get("ready"):
            return replica
        time.sleep(POLL_S)


def _wait_routed(url: str, token: str) -> str:
    """Waits until the gateway routes to the session (it learns of new services every few seconds); ""
    or what it last answered after GATEWAY_WAIT_S."""
    import httpx

    deadline, last = time.monotonic() + GATEWAY_WAIT_S, ""
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5, trust_env=False)
            if reply.status_code == 200:
                return ""
            last = f"HTTP {reply.status_code}"
        except httpx.HTTPError as exc:
            last = str(exc) or type(exc).__name__
        time.sleep(POLL_S)
    return last


def ended_early(client: Client, session: str, what: str, until: str, marker: str) -> str:
    """Why a session (`what`: "notebook NAME", "Ray cluster NAME") ended before it was `until`: its job's state
    and the last line of its log that starts with `marker` (the startup script's own words), else the log's
    last lines."""
    jobs = [j for j in client.jobs(include_finished=True) if j.get("name") == session]
    if not jobs:
        return f"{what} ended before it was {until}"
    job = max(jobs, key=lambda j: j["id"])
    log = Path(job.get("workdir") or os.getcwd()) / f"{session}-{job['id']}.out"
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()][-LOG_LINES:]
    except OSError:
        lines = []
    said = next((line for line in reversed(lines) if line.startswith(marker)), None)
    detail = said or ("; ".join(lines) if lines else f"no output in {log}")
    return f"{what} (job {job['id']}) ended before it was {until} ({job.get('state', '?')}): {detail}"


def _undo(client: Client, session: str, token_id: int) -> None:
    """Nothing half-started stays: the session (if it is still there) and its token go."""
    for step in (lambda: client.delete_service(session), lambda: client.revoke_token(token_id)):
        try:
            step()
        except ClientError:
            pass
