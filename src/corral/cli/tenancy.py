"""`corral tenancy show|apply` (the accounts, users, QOS, queues, limits and priority weights) and
`corral reservation create|list|delete` (advance reservations, as scontrol create reservation)."""
from __future__ import annotations

import time
from typing import Annotated

import typer

from corral.cli import render_tenancy
from corral.cli.connect import open_client
from corral.cli.errors import CliError
from corral.cli.helpstyle import CorralApp
from corral.cli.jobs import UrlOption
from corral.cli.output import fail, print_json, print_lines, print_table, reported_errors, warn
from corral.cli.scheduling import ApiJsonOption
from corral.cli.timespec import AHEAD_FORMS_HELP, parse_when_ahead

# The controller's own settings, which its configuration file holds beside the tenancy (see
# corral.controller.settings): `apply` accepts that file and leaves them out, as they apply at start only.
CONTROLLER_SETTING_KEYS = frozenset({"cluster_name", "kill_grace_s", "node_timeout_s", "kill_report_timeout_s",
                                     "shards_per_gpu", "expedite_hold_s", "self_fencing", "gpu_idle_cancel_s",
                                     "gpu_idle_flag_s", "min_cycle_interval_s",
                                     "scheduler", "partitions", "auth", "ratelimit", "http", "launch_parameters",
                                     "gateway"})

tenancy_app = CorralApp(
    help="The tenancy configuration: accounts, users, QOS, quota queues, limits, priority weights.",
    no_args_is_help=True,
)
reservation_app = CorralApp(help="Advance reservations of nodes or GPUs (scontrol create reservation).",
                            no_args_is_help=True)


@tenancy_app.command("show")
def tenancy_show(
    json_output: ApiJsonOption = False,
    toml_output: Annotated[bool, typer.Option("--toml", help="Print TOML, as 'corral tenancy apply' reads it.")]
    = False,
    url: UrlOption = None,
) -> None:
    """Show the tenancy configuration the controller runs with."""
    if json_output and toml_output:
        fail("give at most one of --json and --toml", code=2)
    with reported_errors(), open_client(url) as client:
        spec = client.tenancy()
    if json_output:
        print_json(spec)
    elif toml_output:
        from corral.cli.toml_text import dumps

        typer.echo(dumps(spec), nl=False)
    else:
        print_tenancy(spec)


def print_tenancy(spec: dict) -> None:
    for title, headers, rows, right in render_tenancy.tenancy_sections(spec):
        typer.echo(f"{title}:")
        print_table(headers, rows, right)
        typer.echo("")
    print_lines([render_tenancy.priority_weights_line(spec)])


@tenancy_app.command("apply")
def tenancy_apply(
    path: Annotated[str, typer.Argument(help="A TOML file: [[accounts]], [[users]], [[qos]], [[queues]], "
                                        "[[limits]], [priority], default_qos.", show_default=False)],
    url: UrlOption = None,
) -> None:
    """Replace the controller's tenancy configuration with a TOML file's; the controller checks it whole.
    The controller's own configuration file may be given: its other settings are left out."""
    with reported_errors():
        spec = tenancy_part(read_toml(path), path)
        with open_client(url) as client:
            applied = client.put_tenancy(spec)
    typer.echo(f"Applied tenancy from {path}: {render_tenancy.tenancy_summary(applied)}")


def tenancy_part(data: dict, path: str) -> dict:
    """`data` less the controller's settings (with a note that they were left out); anything else is sent,
    for the controller to accept or name."""
    skipped = sorted(k for k in data if k in CONTROLLER_SETTING_KEYS)
    if skipped:
        warn(f"{path}: leaving out {', '.join(skipped)}: controller settings, read when it starts")
    return {k: v for k, v in data.items() if k not in CONTROLLER_SETTING_KEYS}


def read_toml(path: str) -> dict:
    import tomllib

    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise CliError(f"cannot read {path!r}: no such file") from None
    except OSError as exc:
        raise CliError(f"cannot read {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{path!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path!r} is not UTF-8 text") from None


_WHEN_HELP = f"Forms: {AHEAD_FORMS_HELP}."
_DURATION_HELP = "How long it lasts, instead of --end: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS."
NameArgument = Annotated[str, typer.Argument(help="Reservation name (letters, digits, _ . -).", show_default=False)]
StartOption = Annotated[str, typer.Option("--start", metavar="TIME", help=f"When it begins. {_WHEN_HELP}",
                                          show_default=False)]
EndOption = Annotated[str | None, typer.Option("--end", metavar="TIME", help=f"When it ends. {_WHEN_HELP}",
                                               show_default=False)]
DurationOption = Annotated[str | None, typer.Option("--duration", help=_DURATION_HELP, show_default=False)]
NodesOption = Annotated[str | None, typer.Option("--nodes", help="Hostlist of the nodes, e.g. node[1-4].",
                                                 metavar="HOSTLIST", show_default=False)]
GpusOption = Annotated[int | None, typer.Option("--gpus", min=1, help="A GPU count, instead of --nodes: the "
                                                "controller picks the nodes.", metavar="N", show_default=False)]
UsersOption = Annotated[str | None, typer.Option("--users", help="Comma-separated users who may use it.",
                                                 show_default=False)]
AccountsOption = Annotated[str | None, typer.Option("--accounts", help="Comma-separated accounts whose jobs may "
                                                    "use it.", show_default=False)]
MaintenanceOption = Annotated[bool, typer.Option("--maintenance", help="No jobs at all on its nodes in the window.")]


@reservation_app.command("create")
def reservation_create(
    name: NameArgument,
    start: StartOption,
    end: EndOption = None,
    duration: DurationOption = None,
    nodes: NodesOption = None,
    gpus: GpusOption = None,
    users: UsersOption = None,
    accounts: AccountsOption = None,
    maintenance: MaintenanceOption = False,
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """Reserve nodes (or a number of GPUs) for a time window."""
    with reported_errors():
        body = reservation_body(name, start, end, duration, nodes, gpus, users, accounts, maintenance,
                                now=time.time())
        with open_client(url) as client:
            created = client.create_reservation(body)
    if json_output:
        print_json(created)
        return
    row = render_tenancy.reservation_rows([created])[0]
    typer.echo(f"Created reservation {created['name']}: nodes {row[5]}, {row[2]} to {row[3]} ({row[4]})")


def reservation_body(name: str, start: str, end: str | None, duration: str | None, nodes: str | None,
                     gpus: int | None, users: str | None, accounts: str | None, maintenance: bool,
                     now: float) -> dict:
    """The ReservationSpec body, or CliError for what the controller would refuse anyway."""
    start_s = parse_when_ahead(start, now)
    end_s = _end_s(start_s, end, duration, now)
    body: dict = {"name": name, "start": start_s, "end": end_s, "users": _csv(users), "accounts": _csv(accounts),
                  "maintenance": maintenance}
    body.update(_what(nodes, gpus))
    return body


def _end_s(start_s: float, end: str | None, duration: str | None, now: float) -> float:
    if (end is None) == (duration is None):
        raise CliError("give exactly one of --end and --duration")
    if end is not None:
        end_s = parse_when_ahead(end, now)
        if end_s <= start_s:
            raise CliError(f"--end {end!r} is not after --start")
        return end_s
    return start_s + _duration_s(duration or "")


def _duration_s(text: str) -> int:
    from corral.jobscript import DirectiveError, parse_time_s

    try:
        return parse_time_s(text)
    except DirectiveError as exc:
        raise CliError(f"invalid duration {text!r}: {exc.reason}") from None


def _what(nodes: str | None, gpus: int | None) -> dict:
    if (nodes is None) == (gpus is None):
        raise CliError("give exactly one of --nodes and --gpus")
    if gpus is not None:
        return {"gpus": gpus}
    from corral.hostlist import HostlistError, expand

    try:
        if not expand(nodes or ""):
            raise CliError("--nodes is empty")
    except HostlistError as exc:
        raise CliError(f"invalid --nodes: {exc}") from None
    return {"nodes": nodes}


def _csv(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


@reservation_app.command("list")
def reservation_list(json_output: ApiJsonOption = False, url: UrlOption = None) -> None:
    """List reservations (sinfo -T)."""
    with reported_errors(), open_client(url) as client:
        items = client.reservations()
    if json_output:
        print_json(items)
        return
    print_table(render_tenancy.RESERVATION_HEADERS, render_tenancy.reservation_rows(items),
                render_tenancy.RESERVATION_RIGHT, state_column=render_tenancy.RESERVATION_STATE_COLUMN)


@reservation_app.command("delete")
def reservation_delete(
    name: Annotated[str, typer.Argument(help="Reservation name.", show_default=False)],
    url: UrlOption = None,
) -> None:
    """Delete a reservation."""
    with reported_errors(), open_client(url) as client:
        client.delete_reservation(name)
    typer.echo(f"Deleted reservation {name}")
