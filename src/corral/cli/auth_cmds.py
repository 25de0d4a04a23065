"""`corral token create|list|revoke` and `corral audit`: API tokens for remote clients, one-time join tokens for
new machines (--join), and the audit log."""
from __future__ import annotations

import time
from typing import Annotated

import typer

from corral.cli.connect import open_client
from corral.cli.errors import CliError
from corral.cli.helpstyle import CorralApp
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_table, reported_errors
from corral.cli.scheduling import ApiJsonOption

token_app = CorralApp(
    help="API tokens for clients off the cluster's hosts (REST, SDK): set CORRAL_TOKEN to one.",
    no_args_is_help=True,
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def lifetime_s(text: str) -> int:
    """`30d`, `12h`, `90m`, `45s` or plain seconds."""
    number, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "s")
    if not number.isdigit() or int(number) == 0:
        raise CliError(f"invalid --expires {text!r}: a number with s, m, h or d, such as 30d")
    return int(number) * _UNITS[unit]


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) if epoch else "-"


JoinOption = Annotated[bool, typer.Option(
    "--join", help="A one-time join token, for a new machine's 'corral agent join' (admins).")]


@token_app.command("create")
def token_create(
    user: Annotated[str | None, typer.Option("--user", "-u", show_default=False,
                                             help="Whose token (admins only; default: yours).")] = None,
    join: JoinOption = False,
    node: Annotated[str | None, typer.Option("--node", show_default=False,
                                             help="With --join: the only node it joins (default: any node "
                                                  "not in the cluster yet).")] = None,
    expires: Annotated[str | None, typer.Option("--expires", show_default=False,
                                                help="Lifetime: 30d, 12h, 90m (default: 30d; --join: 1h, "
                                                     "at most 7d).")] = None,
    description: Annotated[str, typer.Option("--description", "-d", help="What it is for.")] = "",
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """Create a token and print it: it is shown only once (the controller keeps only its hash)."""
    if join:
        _join_token_create(user, node, expires or "1h", description, json_output, url)
        return
    with reported_errors():
        if node:
            raise CliError("--node is for join tokens: add --join")
        body = {"expires_s": lifetime_s(expires or "30d"), "description": description}
        if user:
            body["user"] = user
        with open_client(url) as client:
            made = client.create_token(body)
    if json_output:
        print_json(made)
        return
    typer.echo(made["token"])
    typer.echo(f"corral: token {made['id']} for {made['user']}, expires {_when(made['expires'])}; "
               "use it as CORRAL_TOKEN or Authorization: Bearer", err=True)


def _join_token_create(user: str | None, node: str | None, expires: str, description: str, json_output: bool,
                       url: str | None) -> None:
    with reported_errors():
        if user:
            raise CliError("--user is for API tokens: a join token joins a machine, not a user")
        body: dict = {"expires_s": lifetime_s(expires), "description": description}
        if node:
            body["node"] = node
        with open_client(url) as client:
            made = client.create_join_token(body)
    if json_output:
        print_json(made)
        return
    typer.echo(made["token"])
    which = f"node {made['node']}" if made["node"] else "one node not in the cluster yet"
    typer.echo(f"corral: join token {made['id']} joins {which}, once, until {_when(made['expires'])}; on the new "
               "machine: corral agent join CONTROLLER_URL --token TOKEN (docs/adding-a-machine.md)", err=True)


@token_app.command("list")
def token_list(
    all_users: Annotated[bool, typer.Option("--all", help="Every user's tokens (admins).")] = False,
    join: Annotated[bool, typer.Option("--join", help="The join tokens instead (admins).")] = False,
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """Your tokens (never their secrets)."""
    with reported_errors(), open_client(url) as client:
        items = client.join_tokens() if join else client.tokens(all_users)
    if json_output:
        print_json(items)
        return
    now = time.time()
    if join:
        rows = [[str(t["id"]), t["node"] or "(any new)", _when(t["created"]), t["created_by"], _when(t["expires"]),
                 _join_state(t, now), t["description"]] for t in items]
        print_table(["ID", "NODE", "CREATED", "BY", "EXPIRES", "STATE", "DESCRIPTION"], rows, frozenset({0}))
        return
    rows = [[str(t["id"]), t["user"], _when(t["created"]), _when(t["expires"]),
             "revoked" if t["revoked"] else "expired" if t["expires"] <= now else "active", t["description"]]
            for t in items]
    print_table(["ID", "USER", "CREATED", "EXPIRES", "STATE", "DESCRIPTION"], rows, frozenset({0}))


def _join_state(token: dict, now: float) -> str:
    if token["used"]:
        return f"used by {token['used_by']} from {token['used_from']}"
    return "revoked" if token["revoked"] else "expired" if token["expires"] <= now else "unused"


@token_app.command("revoke")
def token_revoke(
    token_id: Annotated[int, typer.Argument(help="The token's ID (corral token list).", show_default=False)],
    join: Annotated[bool, typer.Option("--join", help="A join token's ID (corral token list --join).")] = False,
    url: UrlOption = None,
) -> None:
    """Revoke a token now (yours; admins: anyone's, and join tokens)."""
    with reported_errors(), open_client(url) as client:
        if join:
            client.revoke_join_token(token_id)
        else:
            client.revoke_token(token_id)
    typer.echo(f"Revoked {'join token' if join else 'token'} {token_id}")


def audit(
    since: Annotated[str | None, typer.Option("--since", show_default=False,
                                              help="Only entries this recent: 1d, 2h, 30m.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100_000, help="At most this many (newest).")] = 1000,
    json_output: ApiJsonOption = False,
    url: UrlOption = None,
) -> None:
    """The audit log (admins): who did what, refusals included."""
    with reported_errors():
        start = time.time() - lifetime_s(since) if since else None
        with open_client(url) as client:
            entries = client.audit(start, limit)
    if json_output:
        print_json(entries)
        return
    rows = [[_when(e["time"]), e["who"], e["credential"], e["action"], e["target"], e["outcome"], e["detail"]]
            for e in entries]
    print_table(["TIME", "WHO", "CREDENTIAL", "ACTION", "TARGET", "OUTCOME", "DETAIL"], rows)
