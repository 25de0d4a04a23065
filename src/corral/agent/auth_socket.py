"""The agent's auth socket (`--auth-socket PATH`): the controller's zero-set-up identity for the users of
every host that runs an agent, without the cluster secret on that host (docs/security.md).

A local user connects; the kernel names them (SO_PEERCRED, corral.unix_auth_socket); the agent looks
their name up here and asks the controller, with its own node's agent credential, for a user credential
(POST /api/v1/agents/{node}/user-credentials), which it relays, or `error: <reason>`. The controller
records that this node vouched for the user; it never gives such a credential root's or an admin's power
unless its [auth] agents_vouch_for_admins says so."""
from __future__ import annotations

import asyncio
import json
import pwd
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
from pydantic import ValidationError

from corral import unix_auth_socket
from corral.private_file import write_atomic
from corral.protocol import API_PREFIX, UserCredentialReply, UserCredentialRequest


async def serve_auth_socket(path: str, node: str, client: Callable[[], httpx.AsyncClient | None]
                            ) -> asyncio.AbstractServer:
    """`client()`: the agent's authenticated client to the controller, None while it has none."""
    async def answer_for(uid: int, gid: int) -> str:
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            return f"error: uid {uid} has no user name on node {node}"
        return await vouch(client(), node, UserCredentialRequest(user=name, uid=uid, gid=gid))

    return await unix_auth_socket.serve(path, answer_for)


async def vouch(client: httpx.AsyncClient | None, node: str, request: UserCredentialRequest) -> str:
    """The controller's credential for the user, or `error: <why not>`."""
    if client is None:
        return "error: the agent is not connected to the controller"
    try:
        response = await client.post(f"{API_PREFIX}/agents/{node}/user-credentials",
                                     content=request.model_dump_json(),
                                     headers={"Content-Type": "application/json"})
    except httpx.RequestError as exc:
        return f"error: the agent cannot reach the controller ({type(exc).__name__}: {exc})"
    if not response.is_success:
        return f"error: the controller refused (HTTP {response.status_code}: {_detail(response)})"
    try:
        return UserCredentialReply.model_validate_json(response.content).credential
    except ValidationError:
        return "error: the controller's answer holds no credential"


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    return detail if isinstance(detail, str) else response.text[:200]


def write_cluster_file(path: Path, controller_urls: Sequence[str], auth_socket: str, ca_file: str | None) -> str | None:
    """The host's cluster.json (world-readable, no secret): its users' commands find the controllers and
    this agent's socket there with no set-up of their own (corral.slurm.common.target). With several
    controllers, `urls` lists them; `url`, the first, is for readers older than `urls`. Where the file
    describes another cluster still running here (its auth socket listens), it stays that cluster's: the URL
    it names is returned and nothing is written."""
    urls = {"urls": list(controller_urls)} if len(controller_urls) > 1 else {}
    data = {"url": controller_urls[0], **urls, "auth_socket": auth_socket, **({"ca_file": ca_file} if ca_file else {})}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        present = json.loads(path.read_text())
    except (OSError, ValueError):
        present = None
    if isinstance(present, dict) and isinstance(present.get("auth_socket"), str) and \
            present["auth_socket"] != auth_socket and unix_auth_socket.listening(present["auth_socket"]):
        return str(present.get("url", "?"))
    write_atomic(path, json.dumps(data, indent=2) + "\n", 0o644)
    return None


def remove_cluster_file(path: Path, auth_socket: str) -> None:
    """Remove it if it still names this agent's socket (another agent or `corral up` may have replaced it)."""
    try:
        if json.loads(path.read_text()).get("auth_socket") == auth_socket:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass
