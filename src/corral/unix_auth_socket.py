"""The plumbing of an auth socket, shared by the controller's and the agents' (docs/security.md): a Unix
socket anyone on the host may connect to, which learns the caller's uid and gid from the kernel
(SO_PEERCRED), never from the caller, and answers one line: a credential, or `error: <reason>`."""
from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable

log = logging.getLogger("corral.auth_socket")
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_ACCEPTING = 0x10000  # __SO_ACCEPTCON in /proc/net/unix's Flags: the socket listens


class SocketTaken(OSError):
    """The socket's path is another running server's."""


def peer_ids(sock: socket.socket) -> tuple[int, int]:
    _pid, uid, gid = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return uid, gid


async def serve(path: str, answer_for: Callable[[int, int], Awaitable[str]]) -> asyncio.AbstractServer:
    """Listen on `path` (its directory made world-searchable; a stale socket there replaced, a live one
    refused: SocketTaken); answer each caller with `await answer_for(uid, gid)`."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    if os.path.exists(path):
        if listening(path):  # another cluster's (or server's): taking it over would cut its users off
            raise SocketTaken(f"the auth socket {path} is served by another running process: give each cluster "
                              "its own (--auth-socket, or [auth] socket)")
        os.unlink(path)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            uid, gid = peer_ids(writer.get_extra_info("socket"))
            writer.write((await answer_for(uid, gid) + "\n").encode())
            await writer.drain()
        except OSError as exc:
            log.warning("auth socket: %s", exc)
        finally:
            writer.close()

    server = await asyncio.start_unix_server(answer, path)
    os.chmod(path, 0o666)  # anyone may ask: the kernel, not the caller, says who they are
    log.info("auth socket at %s", path)
    return server


def close(server: asyncio.AbstractServer, path: str) -> None:
    """Stop answering; remove the socket, and its directory when that is left empty."""
    server.close()
    with contextlib.suppress(OSError):
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def listening(path: str) -> bool:
    """Whether a server listens on the Unix socket at `path` on this host (its network namespace), read
    from /proc/net/unix: unlike connecting, asking has no effect on the server (an auth socket answers every
    connection with a credential)."""
    target = os.path.abspath(path)
    try:
        with open("/proc/net/unix") as table:
            next(table, None)  # the header
            for line in table:
                fields = line.split(maxsplit=7)
                if len(fields) == 8 and fields[7].rstrip("\n") == target and int(fields[3], 16) & _ACCEPTING:
                    return True
    except (OSError, ValueError):
        return False
    return False
