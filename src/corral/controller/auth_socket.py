"""The auth socket: a Unix socket anyone on the controller host may connect to. It reads the caller's uid
and gid from the kernel (SO_PEERCRED), so no client can lie about them, and answers one line: a
short-lived signed user credential (credentials.issue_user), or `error: <reason>`. Munge's model, for
one host: docs/security.md."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import socket
import struct

from corral.controller import credentials as cred
from corral.controller.auth import Authenticator

log = logging.getLogger("corral.controller.auth")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


def peer_ids(sock: socket.socket) -> tuple[int, int]:
    _pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid, gid


async def serve_auth_socket(path: str, authn: Authenticator) -> asyncio.AbstractServer:
    """Listen on `path` (its directory made world-searchable; a stale socket there replaced)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            writer.write((issue_for_peer(writer.get_extra_info("socket"), authn) + "\n").encode())
            await writer.drain()
        except OSError as exc:
            log.warning("auth socket: %s", exc)
        finally:
            writer.close()

    server = await asyncio.start_unix_server(answer, path)
    os.chmod(path, 0o666)  # anyone may ask: the kernel, not the caller, says who they are
    log.info("auth socket at %s", path)
    return server


def close_auth_socket(server: asyncio.AbstractServer, path: str) -> None:
    """Stop answering; remove the socket, and its directory when that is left empty."""
    server.close()
    with contextlib.suppress(OSError):
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def issue_for_peer(sock: socket.socket, authn: Authenticator) -> str:
    uid, gid = peer_ids(sock)
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"error: uid {uid} has no user name on the controller host"
    return cred.issue_user(authn.key, name, uid, gid, authn.clock(), authn.settings.credential_ttl_s)
