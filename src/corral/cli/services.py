"""`corral service apply|list|show|scale|restart|delete|logs` (docs/services.md).

`apply -f svc.toml` reads and checks the file here first (api/service_file.py: every problem with its TOML
key path, before anything is sent), then the controller checks it against the cluster. pydantic is
imported by `apply` only: the other commands start as fast as `corral queue`."""
from __future__ import annotations

from typing import Annotated

import typer

from corral.cli import render_services
from corral.cli.connect import open_client
from corral.cli.helpstyle import CorralApp
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_lines, print_table, reported_errors
from corral.cli.scheduling import ApiJsonOption

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
    from corral.cli.logs import service_logs

    service_logs(target, follow, error, url)
