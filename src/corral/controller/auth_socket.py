"""The controller's auth socket: anyone on the controller host may connect; the kernel names the caller
(corral.unix_auth_socket) and the answer is a short-lived signed user credential (credentials.issue_user),
or `error: <reason>`. Munge's model: docs/security.md. Agents serve the same on their hosts
(corral.agent.auth_socket), vouching for their users to the controller."""
from __future__ import annotations

import asyncio
import pwd

from corral import unix_auth_socket
from corral.controller import credentials as cred
from corral.controller.auth import Authenticator


async def serve_auth_socket(path: str, authn: Authenticator) -> asyncio.AbstractServer:
    async def answer_for(uid: int, gid: int) -> str:
        return issue_for(uid, gid, authn)

    return await unix_auth_socket.serve(path, answer_for)


def close_auth_socket(server: asyncio.AbstractServer, path: str) -> None:
    unix_auth_socket.close(server, path)


def issue_for(uid: int, gid: int, authn: Authenticator) -> str:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"error: uid {uid} has no user name on the controller host"
    return cred.issue_user(authn.key, name, uid, gid, authn.clock(), authn.settings.credential_ttl_s)
