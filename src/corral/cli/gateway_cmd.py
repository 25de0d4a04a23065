"""`corral gateway`: the services' stable endpoint, http://HOST:PORT/s/SERVICE/ (decision 0018)."""
from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Annotated

import typer


def gateway(
    controller: Annotated[str | None, typer.Option(
        "--controller", help="The controller's URL (several: comma-separated); default: CORRAL_URL or "
                             "cluster.json, as every corral command.")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="The port to serve on (0: any free one).")] = 6820,
    host: Annotated[str, typer.Option(help="The address to serve on.")] = "127.0.0.1",
    auth_cache_s: Annotated[float, typer.Option(
        min=0, max=300, help="How long an accepted credential is trusted before the controller is asked "
                             "again: a revoked token works at most this long.")] = 5.0,
    auth_stale_s: Annotated[float, typer.Option(
        min=0, max=3600, help="While no controller answers, a credential accepted within this many seconds "
                              "is still accepted.")] = 60.0,
    report_every_s: Annotated[float, typer.Option(
        min=0.5, max=300, help="How often each service's load goes to the controller (its autoscaler).")] = 5.0,
    secret_file: Annotated[Path | None, typer.Option(
        "--secret-file", show_default=False, metavar="FILE",
        help="The cluster secret's file (default: CORRAL_SECRET_FILE or cluster.json's); `corral up` names "
             "its own.")] = None,
    ca_file: Annotated[Path | None, typer.Option(
        "--ca-file", show_default=False, metavar="FILE",
        help="The CA that signed the controller's certificate (default: CORRAL_CA_FILE or cluster.json's).")] = None,
    hold_s: Annotated[float, typer.Option(
        min=0, max=3600, help="How long a request to a service with no ready replica (starting, or scaled to "
                              "zero) waits for one before its 503.")] = 10.0,
) -> None:
    """Serve each service at http://HOST:PORT/s/SERVICE/: ready replicas only, least in-flight first."""
    from corral.gateway.main import GatewaySettings, serve
    from corral.slurm.common.target import TargetError, resolve_target

    try:
        env = dict(os.environ)
        if secret_file is not None:
            env["CORRAL_SECRET_FILE"] = str(secret_file)
            env.pop("CORRAL_SECRET", None)
            env.pop("CORRAL_TOKEN", None)
        if ca_file is not None:
            env["CORRAL_CA_FILE"] = str(ca_file)
        target = resolve_target(env, controller)
    except TargetError as exc:
        raise typer.BadParameter(str(exc), param_hint="--controller") from None
    if not target.secret:
        typer.echo("corral gateway: error: no credential to read the services with: set CORRAL_SECRET_FILE "
                   "(the cluster secret) or CORRAL_TOKEN (an admin's token)", err=True)
        raise typer.Exit(2)
    if auth_stale_s < auth_cache_s:
        raise typer.BadParameter(f"must be at least --auth-cache-s ({auth_cache_s:g})",
                                 param_hint="--auth-stale-s")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s corral gateway: %(message)s")
    settings = GatewaySettings(tuple(target.urls), target.secret, host, port, target.ca_file, auth_cache_s,
                               auth_stale_s, report_every_s, hold_s=hold_s)
    try:
        asyncio.run(serve(settings))
    except OSError as exc:
        typer.echo(f"corral gateway: error: cannot serve on {host}:{port}: {exc.strerror or exc}", err=True)
        raise typer.Exit(1) from None
