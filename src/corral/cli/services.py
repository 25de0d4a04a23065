"""`corral service apply|list|show|scale|restart|delete|logs` (docs/services.md).

`apply -f svc.toml` reads and checks the file here first (api/service_file.py: every problem with its TOML
key path, before anything is sent), then the controller checks it against the cluster. pydantic is
imported by `apply` only: the other commands start as fast as `corral queue`."""
from __future__ import annotations

import sys
import time
from typing import Annotated, BinaryIO

import typer

from corral.cli import render_services
from corral.cli.client import Client
from corral.cli.connect import open_client
from corral.cli.errors import CliError
from corral.cli.helpstyle import CorralApp
from corral.cli.jobs import UrlOption
from corral.cli.output import fail, print_json, print_lines, print_table, reported_errors
from corral.cli.scheduling import ApiJsonOption

ACTIVE = ("PENDING", "RUNNING", "COMPLETING")
POLL_S = 0.5
CHUNK = 1 << 16

service_app = CorralApp(
    help="Long-running services: replicas of a command kept running, each a job in the service's account and "
         "quota, with named ports, probes, restarts, rolling updates and autoscaling (docs/services.md).",
    no_args_is_help=True,
)
NameArgument = Annotated[str, typer.Argument(help="The service's name.", show_default=False)]


@service_app.command("apply")
def apply(
    file: Annotated[str, typer.Option("--file", "-f", help="The service's TOML file (docs/services.md lists "
                                      "its keys).", show_default=False)],
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """Create a service from a TOML file, or update it to the file (a new revision, rolled out replica by
    replica). Says whether it was created, updated or unchanged."""
    from corral.api.service_file import ServiceFileError, load_service_file

    try:
        spec = load_service_file(file)
    except ServiceFileError as exc:
        for line in exc.lines:
            typer.echo(f"corral: error: {line}", err=True)
        raise typer.Exit(1) from None
    with reported_errors(), open_client(url) as client:
        # What the file says (and the workdir it implies), not every default: the controller fills those.
        reply = client.apply_service(spec.model_dump(mode="json", exclude_unset=True))
    if json_output:
        print_json(reply)
        return
    typer.echo(f"service {reply['name']} {reply['outcome']} (revision {reply['revision']})")


@service_app.command("list")
def list_services(json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """Every service: its owner, account, ready and desired replicas, revision, ports, and why it waits."""
    with reported_errors(), open_client(url) as client:
        services = client.services()
    if json_output:
        print_json(services)
        return
    print_table(render_services.LIST_HEADERS, render_services.service_rows(services), render_services.LIST_RIGHT)


@service_app.command("show")
def show(name: NameArgument, json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """One service: its spec in short, each replica (job, node, state, readiness, restarts, probes,
    endpoints) and its history."""
    with reported_errors(), open_client(url) as client:
        service = client.service(name)
    if json_output:
        print_json(service)
        return
    print_service(service)


def print_service(service: dict) -> None:
    print_lines(render_services.service_summary(service))
    typer.echo("")
    if service["replicas"]:
        print_table(render_services.REPLICA_HEADERS, render_services.replica_rows(service),
                    render_services.REPLICA_RIGHT, state_column=render_services.REPLICA_STATE_COLUMN)
    else:
        typer.echo("No replicas.")
    if service.get("history"):
        typer.echo("")
        print_lines(["History:", *(f"  {line}" for line in service["history"])])


@service_app.command("scale")
def scale(
    name: NameArgument,
    replicas: Annotated[int, typer.Argument(min=0, help="How many replicas it should have.", show_default=False)],
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """Set how many replicas the service runs (within its autoscale range, if it has one)."""
    with reported_errors(), open_client(url) as client:
        service = client.scale_service(name, replicas)
    if json_output:
        print_json(service)
        return
    typer.echo(f"service {name} scaled to {service['desired_replicas']} replicas "
               f"({service['ready_replicas']} ready now)")


@service_app.command("restart")
def restart(name: NameArgument, url: UrlOption = None) -> None:
    """Replace every replica, one at a time as a rolling update does (spec and revision unchanged)."""
    with reported_errors(), open_client(url) as client:
        client.restart_service(name)
    typer.echo(f"service {name} restarting its replicas")


@service_app.command("delete")
def delete(name: NameArgument, url: UrlOption = None) -> None:
    """Stop every replica (SIGTERM, then SIGKILL after the grace period) and remove the service."""
    with reported_errors(), open_client(url) as client:
        client.delete_service(name)
    typer.echo(f"service {name} deleted")


@service_app.command("logs")
def logs(
    target: Annotated[str, typer.Argument(metavar="NAME[/REPLICA]", show_default=False,
                                          help="The service (all its replicas) or one replica by index.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing what they write (as tail -f).")]
    = False,
    error: Annotated[bool, typer.Option("--error", "-e", help="The replicas' --error files.")] = False,
    url: UrlOption = None,
) -> None:
    """Print a service's replicas' output (each replica's first task's), read from the filesystem the
    nodes share; several replicas as tail prints several files."""
    service_logs(target, follow, error, url)


def service_logs(target: str, follow: bool, error: bool, url: str | None) -> None:
    from corral.cli.logs import show_output

    try:
        name, index = render_services.parse_service_ref(target)
    except ValueError as exc:
        fail(str(exc), code=2)
    with reported_errors(), open_client(url) as client:
        found = replica_jobs(client, name, index)
        if len(found) == 1:
            show_output(client, found[0][1], follow, error)
            return
        try:
            _tail_many(client, found, follow, error)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def replica_jobs(client: Client, name: str, index: int | None) -> list[tuple[str, dict]]:
    """Each replica's label (`web/1`) and job (of one replica: its newest job), or CliError saying why
    there is none."""
    replicas = [r for r in client.service(name)["replicas"] if r.get("job_id") is not None]
    if index is not None:
        chosen = [r for r in replicas if r["index"] == index][:1]  # newest first: the current revision's
        if not chosen:
            known = ", ".join(str(i) for i in sorted({r["index"] for r in replicas})) or "none"
            raise CliError(f"service {name} has no replica {index} (its replicas: {known})")
        replicas = chosen
    if not replicas:
        raise CliError(f"service {name} has no replicas running or waiting: no output to show")
    return [(f"{name}/{r['index']}", client.job(r["job_id"])) for r in replicas]


def _tail_many(client: Client, replicas: list[tuple[str, dict]], follow: bool, error: bool) -> None:
    """Several replicas' files: each new piece under a `==> web/1 (job N) <==` header, as tail prints
    several files; those not readable here are named and left out."""
    streams = _open_outputs(replicas, error)
    try:
        last: list[str] = []
        while True:
            wrote = [_copy_new(label, stream, last) for label, stream in streams]
            if any(wrote):
                continue
            if not follow or not any(client.job(job["id"])["state"] in ACTIVE for _name, job in replicas):
                return
            time.sleep(POLL_S)
    finally:
        for _label, stream in streams:
            stream.close()


def _open_outputs(replicas: list[tuple[str, dict]], error: bool) -> list[tuple[str, BinaryIO]]:
    from corral.cli.logs import output_path

    streams: list[tuple[str, BinaryIO]] = []
    for name, job in replicas:
        label = f"{name} (job {job['id']})"
        path = output_path(job, error)
        try:
            streams.append((label, open(path, "rb")))
        except OSError as exc:
            node = job["slices"][0]["node"] if job.get("slices") else "no node yet"
            typer.echo(f"corral: {label}: cannot read {path} ({exc.strerror}); it is written on {node}", err=True)
    if not streams:
        fail("none of the replicas' output files can be read here")
    return streams


def _copy_new(label: str, stream: BinaryIO, last: list[str]) -> bool:
    """Copy what `stream` has new, under its header when another file's came last; whether it had any."""
    data = stream.read(CHUNK)
    if not data:
        return False
    out = sys.stdout.buffer
    if last[-1:] != [label]:
        out.write(f"{chr(10) if last else ''}==> {label} <==\n".encode())
        last[:] = [label]
    out.write(data)
    out.flush()
    return True
