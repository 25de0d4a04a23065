"""Request bodies are bounded before they are read (docs/security.md, "Request bodies and slow clients").

`BodyGate` is plain ASGI in front of the routes. For a request that carries a body it authenticates the
bearer credential from the headers before reading a byte (401, audited as every 401), refuses a declared
Content-Length over the route's cap (413) before reading, then reads the body itself, counting what
arrives (a chunked body stops with 413 at the cap) and giving it `body_timeout_s` in all (408). A user over
their rate limit ([ratelimit]) gets the 429 before the body too. Only then do the routes see the body,
replayed whole: a refusal never reaches a route, so nothing is half-applied. A refusal that leaves body
bytes unread closes the connection, so they are never read at all.

Without the gate FastAPI read a body whole before any dependency looked at the credential: a 200 MiB body
with no credential took the controller from 86 to 488 MiB of RSS (888 MiB after a second), and kept it."""
from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import HTTPException

from corral.controller import credentials as cred
from corral.controller.auth import Authenticator, Principal, Unauthenticated
from corral.protocol import API_PREFIX

MIB = 1024 * 1024
# Every route but the few below: token and join requests, job actions and updates, node updates,
# reservations. Their largest fields are a comment or reason (65,536 characters) and a hostlist.
SMALL_BODY_BYTES = 1 * MIB
# The scope key under which the gate leaves the principal it found, so the route's guard does not look the
# credential up a second time (a token costs a database read).
PRINCIPAL_KEY = "corral.principal"
# Set when the gate took the request's token of its user's rate limit (controller.guard takes none then).
RATE_TAKEN_KEY = "corral.rate_taken"

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """The controller config's [http] section (docs/configuration.md)."""

    # A job submission's script (4 MiB), environment (2 MiB) and arguments (2 MiB) are 8 MiB of text at
    # most (corral.limits); as JSON, escaped newlines, quotes and backslashes can double that. Steps (srun)
    # and the tenancy document share the cap.
    max_body_mib: int = 32
    # An agent's registration and event batches (100 events, each with up to 65,536 task exits).
    max_agent_body_mib: int = 32
    # A connection with no request under way is closed after this long (uvicorn's keep-alive timeout, and
    # a new connection that sends nothing).
    idle_timeout_s: float = 5.0
    # From the first byte of a request to the end of its headers (uvicorn has no such limit).
    header_timeout_s: float = 10.0
    # From the end of the headers to the end of the body.
    body_timeout_s: float = 60.0


_JOB_BODY_ROUTES = (("POST", re.compile(rf"{API_PREFIX}/jobs")),
                    ("POST", re.compile(rf"{API_PREFIX}/jobs/[^/]+/steps")),
                    ("PUT", re.compile(rf"{API_PREFIX}/tenancy")))
_AGENT_BODY_ROUTES = (("POST", re.compile(rf"{API_PREFIX}/agents/register")),
                      ("POST", re.compile(rf"{API_PREFIX}/agents/[^/]+/events")))
JOIN_PATH = f"{API_PREFIX}/agents/join"


def body_cap(method: str, path: str, settings: HttpSettings) -> int:
    """The largest body, in bytes, that `method path` accepts."""
    if any(method == m and pattern.fullmatch(path) for m, pattern in _JOB_BODY_ROUTES):
        return settings.max_body_mib * MIB
    if any(method == m and pattern.fullmatch(path) for m, pattern in _AGENT_BODY_ROUTES):
        return settings.max_agent_body_mib * MIB
    return SMALL_BODY_BYTES


class Refusal(Exception):
    """An answer instead of the routes; `outcome` is the audit log's ("": not audited)."""

    def __init__(self, status: int, detail: str, principal: Principal | None, outcome: str,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status, self.detail, self.principal, self.outcome = status, detail, principal, outcome
        self.headers = headers or {}


class BodyGate:
    """ASGI middleware: authenticate, then read a bounded body within a deadline, then call the routes.
    `ready()`: whether the controller has an engine. Without one (a standby) it cannot look job credentials
    up, and it answers API requests 421 without reading their bodies: the gate only sees to it that the
    connection closes after that answer, so that the body is never read."""

    def __init__(self, app, authenticator: Authenticator, settings: HttpSettings, ready: Callable[[], bool],
                 rate_refusal: Callable[[Principal], HTTPException | None] = lambda _principal: None) -> None:
        """`rate_refusal(principal)`: takes a token of the user's rate limit, or gives the 429 to answer
        (Guard.rate_refusal), so that a user over the limit gets it before the body is read."""
        self.app = app
        self.authn = authenticator
        self.settings = settings
        self.ready = ready
        self.rate_refusal = rate_refusal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = _declared_length(scope) if scope["type"] == "http" else 0
        if declared == 0:
            await self.app(scope, receive, send)
            return
        if not self.ready():
            await self.app(scope, receive, _closing(send))
            return
        action = f"{scope['method']} {scope['path']}"
        cap = body_cap(scope["method"], scope["path"], self.settings)
        principal: Principal | None = None
        try:
            principal = await self._authenticate(scope)
            if principal is not None and principal.acts_for_users:
                _raise_if_limited(self.rate_refusal(principal), principal)
                scope[RATE_TAKEN_KEY] = True
            if declared is not None and declared > cap:
                raise Refusal(413, f"the request body of {declared:,} bytes is over this route's limit of "
                                   f"{cap:,} bytes", principal, "denied")
            body = await self._read(receive, cap, declared, principal)
        except Refusal as refusal:
            if refusal.outcome:  # 429s are not audited (controller.guard says why)
                await self.authn.audit(refusal.principal, action, "", refusal.outcome, refusal.detail)
            await _refuse(refusal, send)
            return
        except ClientGone:
            return
        if principal is not None:
            scope[PRINCIPAL_KEY] = principal
        await self.app(scope, _replay(body, receive), send)

    async def _authenticate(self, scope: Scope) -> Principal | None:
        """The caller, or a 401; None for a join token of the right form (the join route checks it
        against the database, audited, once it has the node's name from the small body)."""
        text = _bearer(scope)
        if text is not None and text.startswith(cred.JOIN_PREFIX) and scope["path"] == JOIN_PATH:
            try:
                cred.split_token(text, cred.JOIN_PREFIX)
            except cred.BadCredential as exc:
                raise Refusal(401, f"not authenticated: {exc}", None, "unauthenticated",
                              {"WWW-Authenticate": "Bearer"}) from None
            return None
        try:
            return await self.authn.authenticate(text)
        except Unauthenticated as exc:
            raise Refusal(401, f"not authenticated: {exc}", None, "unauthenticated",
                          {"WWW-Authenticate": "Bearer"}) from None

    async def _read(self, receive: Receive, cap: int, declared: int | None,
                    principal: Principal | None) -> bytes:
        """The whole body, or a Refusal once it passes `cap` or takes longer than body_timeout_s."""
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.settings.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise ClientGone
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > cap:
                        raise Refusal(413, f"the request body is over this route's limit of {cap:,} bytes",
                                      principal, "denied")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            expected = f" of {declared:,}" if declared is not None else ""
            raise Refusal(408, f"the request body did not arrive within {self.settings.body_timeout_s:g} s "
                               f"({size:,}{expected} bytes came)", principal, "denied") from None


def _raise_if_limited(refusal: HTTPException | None, principal: Principal) -> None:
    if refusal is not None:
        raise Refusal(refusal.status_code, str(refusal.detail), principal, "", dict(refusal.headers or {}))


class ClientGone(Exception):
    """The client closed the connection before its body was whole: there is no one to answer."""


def _declared_length(scope: Scope) -> int | None:
    """The body's declared length: 0 for none, None for a chunked body (its length is known at its end).
    uvicorn's h11 has already refused a malformed or doubled Content-Length with 400."""
    length = 0
    for name, value in scope["headers"]:
        if name == b"transfer-encoding":
            return None
        if name == b"content-length":
            length = int(value)
    return length


def _bearer(scope: Scope) -> str | None:
    """The credential of `Authorization: Bearer <credential>`, as fastapi.security.HTTPBearer reads it."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, text = value.decode("latin-1").partition(" ")
            return text.strip() or None if scheme.lower() == "bearer" else None
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """The routes' receive: the body read, in one message; then the connection's own (a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _closing(send: Send) -> Send:
    """`send`, with the connection closed after the response (its request's body was not read)."""

    async def closing(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
        await send(message)

    return closing


async def _refuse(refusal: Refusal, send: Send) -> None:
    """The refusal, as every refusal's `{"detail": ...}`; the connection closes after it, so a body that
    was not read (or not all of it) never is."""
    content = json.dumps({"detail": refusal.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(content)).encode()),
               (b"connection", b"close")]
    headers += [(name.lower().encode(), value.encode()) for name, value in refusal.headers.items()]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": content, "more_body": False})
