"""`corral status`: which controller leads. Every known controller (those configured, and the peers their
replies name) is asked for its own /status; one that cannot be asked is shown as such, with the reason."""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Annotated

import typer

from corral.cli.client import Client, ClientError
from corral.cli.connect import open_client
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_lines, reported_errors
from corral.cli.render import format_table
from corral.slurm.common.leader import NotLeader, NotSent

HEADERS = ("URL", "ROLE", "EPOCH", "PID", "LAST SEEN")
RIGHT = frozenset({2, 3})
NO_STATUS = "answers, but has no /status: a controller from before several controllers could share a cluster"


@dataclass(frozen=True, slots=True)
class ControllerState:
    url: str
    role: str | None  # "leader" or "standby" as it says itself; None when it could not say
    epoch: int | None
    pid: int | None
    last_seen: float | None  # when the cluster last heard of it (a peer's report), Unix time
    error: str | None = None  # why it could not say (unreachable, ...)
    reachable: bool = True  # whether it answered at all


def survey(client: Client) -> list[ControllerState]:
    """Each controller's own answer, those configured first, then peers named in the answers."""
    answers: dict[str, ControllerState] = {}
    reported: dict[str, dict] = {}  # url -> what some controller's `controllers` says of it
    queue = list(client.urls)
    while queue:
        url = queue.pop(0).rstrip("/")
        if url in answers:
            continue
        answers[url], peers = _ask(client, url)
        for peer in peers:
            if isinstance(peer, dict) and isinstance(peer.get("url"), str):
                reported.setdefault(peer["url"].rstrip("/"), peer)
                queue.append(peer["url"])
    return [_with_last_seen(state, reported.get(state.url)) for state in answers.values()]


def _ask(client: Client, url: str) -> tuple[ControllerState, list]:
    try:
        reply = client.status_of(url)
    except NotSent as exc:
        return _unknown(url, f"unreachable: {exc.reason}", reachable=False), []
    except NotLeader as exc:
        return _unknown(url, f"refused /status as a standby ({exc})"), []
    except ClientError as exc:
        return _unknown(url, NO_STATUS if exc.status == 404 else str(exc)), []
    if not isinstance(reply, dict) or reply.get("role") not in ("leader", "standby"):
        return _unknown(url, f"sent a /status reply without a role: {str(reply)[:200]}"), []
    state = ControllerState(url, reply["role"], _int(reply.get("epoch")), _int(reply.get("pid")), None)
    peers = reply.get("controllers")
    return state, peers if isinstance(peers, list) else []


def _unknown(url: str, error: str, reachable: bool = True) -> ControllerState:
    return ControllerState(url, None, None, None, None, error, reachable)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _with_last_seen(state: ControllerState, report: dict | None) -> ControllerState:
    seen = report.get("last_seen") if report else None
    if not isinstance(seen, (int, float)) or isinstance(seen, bool):
        return state
    if state.role is None and report is not None:  # what the others last knew of it
        epoch, pid = _int(report.get("epoch")), _int(report.get("pid"))
        return ControllerState(state.url, None, epoch, pid, float(seen), state.error, state.reachable)
    return ControllerState(state.url, state.role, state.epoch, state.pid, float(seen), state.error, state.reachable)


def leader_of(states: Sequence[ControllerState]) -> ControllerState | None:
    """The controller that says it leads; of two (one has not yet learnt it was replaced), the later epoch."""
    leaders = [s for s in states if s.role == "leader"]
    return max(leaders, key=lambda s: s.epoch or 0) if leaders else None


def status_lines(states: Sequence[ControllerState], now: float) -> list[str]:
    rows = [(s.url, _role(s), _text(s.epoch), _text(s.pid), _age(s.last_seen, now)) for s in states]
    lines = format_table(HEADERS, rows, RIGHT)
    lines += [f"{s.url}: {s.error}" for s in states if s.error]
    leader = leader_of(states)
    if leader is None:
        lines.append("no controller leads: an election may be under way (or none runs); ask again shortly")
    else:
        lines.append(f"leader: {leader.url} (epoch {_text(leader.epoch)}, pid {_text(leader.pid)})")
    return lines


def _role(state: ControllerState) -> str:
    return state.role or ("unknown" if state.reachable else "unreachable")


def _text(value: int | None) -> str:
    return "-" if value is None else str(value)


def _age(seen: float | None, now: float) -> str:
    if seen is None:
        return "-"
    return f"{max(0.0, now - seen):.0f}s ago"


def status(
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON: each controller's url, role, epoch, pid, "
                                              "last_seen, error and reachable, and the leader's url.")] = False,
    url: UrlOption = None,
) -> None:
    """Which controller leads: every controller's role, epoch and pid (exit status 1 when none leads)."""
    with reported_errors(), open_client(url) as client:
        states = survey(client)
    leader = leader_of(states)
    if json_output:
        print_json({"leader": leader.url if leader else None, "controllers": [asdict(s) for s in states]})
    else:
        print_lines(status_lines(states, time.time()))
    if leader is None:
        raise typer.Exit(1)
