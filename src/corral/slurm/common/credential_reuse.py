"""User credentials from an auth socket, reused across the calls of one user's command helper (issue 24
item 1; docs/security.md, "The command helper"; decision 0021).

Without it every sbatch or squeue of a user on a cluster with an auth socket asks the controller for a fresh
credential first: one more round trip that wakes the controller before the request itself. The helper
(corral.slurm.helper) keeps the credentials its calls fetched, in its memory only, and each child it forks
starts with a copy. A credential is reused only
- from the same auth socket: its path and the socket's identity (device, inode, change time), so a controller
  that started again (a new socket, perhaps a new key) is asked again;
- while at least REUSE_MARGIN_S of its lifetime remains (a call that takes long still holds a valid one);
- when it names this process's own uid (the helper serves its own user alone: SO_PEERCRED);
- until the controller refuses it (401): the request is then sent once more with a fresh credential
  (corral.slurm.common.http), and the refused one is forgotten by the helper too.

A child learns a credential where the helper cannot (it needs the call's environment); it reports it to the
helper over a pipe that only the helper's children hold: `report_fd` (frames of at most PIPE_BUF bytes, so
each is written whole). Outside the helper nothing is installed and every call asks the socket, as before.
The same pipe carries the controller's address a call connected to (`controller`), for the child that waits
for the next call to connect there ahead (corral.slurm.common.preconnect)."""
from __future__ import annotations

import contextlib
import os
import time

REUSE_MARGIN_S = 60.0  # of a credential's lifetime (5 min by default): what a reused one still has at least
USER_PREFIX = "cu1."  # corral.controller.credentials.USER_PREFIX
LENGTH_BYTES = 2
MAX_FRAME = 4096  # PIPE_BUF: a write of at most this much to a pipe is never interleaved with another
REMEMBER, FORGET, CONTROLLER = b"r", b"f", b"c"

SocketIdentity = tuple[str, int, int, int]


class Reuse:
    """The credentials known to this process, by auth socket; `report_fd`: where a helper's child tells the
    helper what it learned (None in the helper itself)."""

    def __init__(self, report_fd: int | None = None) -> None:
        self.known: dict[SocketIdentity, tuple[str, float]] = {}
        self.report_fd = report_fd
        self._pending = b""
        # The controller the last call connected to: (host, port) as its URL names them, and the address
        # (socket family, IP, port) it reached; None until a call reports one.
        self.controller: tuple[tuple[str, int], tuple[int, str, int]] | None = None

    def credential(self, path: str) -> str | None:
        """A credential from `path` that may still be used, or None."""
        identity = socket_identity(path)
        if identity is None:
            return None
        found = self.known.get(identity)
        if found is None:
            return None
        credential, expires = found
        if time.time() >= expires - REUSE_MARGIN_S or own_expiry(credential) is None:  # old, or not this uid's
            del self.known[identity]
            return None
        return credential

    def remember(self, path: str, credential: str) -> None:
        identity = socket_identity(path)
        expires = own_expiry(credential)
        if identity is None or expires is None:
            return
        self.known[identity] = (credential, expires)
        self._report(REMEMBER, identity, credential)

    def forget(self, path: str) -> None:
        identity = socket_identity(path)
        if identity is not None:
            self.known.pop(identity, None)
            self._report(FORGET, identity, "")

    def report_controller(self, host: str, port: int, address: tuple[int, str, int]) -> None:
        """A call connected to `address` for the controller at `host`:`port`; told the helper only if it
        is not what this process knows already."""
        if self.controller == ((host, port), address):
            return
        self.controller = ((host, port), address)
        self._send(CONTROLLER + "\0".join((host, str(port), *map(str, address))).encode())

    def _report(self, kind: bytes, identity: SocketIdentity, credential: str) -> None:
        self._send(kind + "\0".join((*map(str, identity), credential)).encode())

    def _send(self, body: bytes) -> None:
        if self.report_fd is None:
            return
        if len(body) + LENGTH_BYTES > MAX_FRAME:
            return
        with contextlib.suppress(OSError):  # a helper gone: nothing to tell
            os.write(self.report_fd, len(body).to_bytes(LENGTH_BYTES, "big") + body)

    def take_reports(self, fd: int) -> None:
        """In the helper: what its children reported on `fd` (non-blocking), applied."""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(fd, 1 << 16):
                self._pending += chunk
        while len(self._pending) >= LENGTH_BYTES:
            size = int.from_bytes(self._pending[:LENGTH_BYTES], "big")
            if len(self._pending) < LENGTH_BYTES + size:
                return
            body = self._pending[LENGTH_BYTES:LENGTH_BYTES + size]
            self._pending = self._pending[LENGTH_BYTES + size:]
            self._apply(body)

    def _apply(self, body: bytes) -> None:
        fields = body[1:].decode(errors="replace").split("\0")
        if body[:1] == CONTROLLER:
            if len(fields) == 5 and all(field.isdigit() for field in (fields[1], fields[2], fields[4])):
                self.controller = ((fields[0], int(fields[1])), (int(fields[2]), fields[3], int(fields[4])))
            return
        if len(fields) != 5 or not all(field.lstrip("-").isdigit() for field in fields[1:4]):
            return
        identity = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
        if body[:1] == FORGET:
            self.known.pop(identity, None)
            return
        expires = own_expiry(fields[4])
        if body[:1] == REMEMBER and expires is not None:
            self.known[identity] = (fields[4], expires)


def socket_identity(path: str) -> SocketIdentity | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return path, found.st_dev, found.st_ino, found.st_ctime_ns


def own_expiry(credential: str) -> float | None:
    """When a user credential that names this process's uid expires; None for anything else."""
    import base64

    parts = credential.split(".")
    if len(parts) != 3 or credential[:len(USER_PREFIX)] != USER_PREFIX:
        return None
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
        _user, uid, _gid, _issued, expires, *_rest = payload.split(":")
        if int(uid) != os.getuid():
            return None
        return float(expires)
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None


_active: list[Reuse] = []  # installed by the command helper only


def install(reuse: Reuse) -> None:
    _active[:] = [reuse]


def active() -> Reuse | None:
    return _active[0] if _active else None
