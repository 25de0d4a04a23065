"""Bearer credentials on a non-public service, checked by the controller (`GET /api/v1/whoami` with the
caller's credential: user credentials, API tokens, job credentials, the cluster secret; docs/security.md).

A positive answer is cached for `ttl_s` (default 5 s) under the credential's SHA-256, so a revoked token or an
ended job's credential stops working through the gateway at most `ttl_s` after the controller stops accepting
it. While no controller answers (a failover), a credential verified within `stale_s` (default 60 s) is still
accepted: revocation latency is then bounded by `stale_s`; anything else gets 503. Refusals are not cached:
the controller audits every 401/403. Concurrent checks of one credential share one request."""
from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from corral.gateway.controller import ControllerClient, ControllerUnreachable

MAX_CACHED = 10_000


class AuthRefused(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class _Verified:
    name: str
    at: float


class Authenticator:
    def __init__(self, controller: ControllerClient, *, ttl_s: float = 5.0, stale_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._controller = controller
        self.ttl_s = ttl_s
        self.stale_s = stale_s
        self._clock = clock
        self._cache: dict[str, _Verified] = {}
        self._pending: dict[str, asyncio.Future[str]] = {}

    async def authenticate(self, authorization: str | None) -> str:
        """The user the credential acts as; AuthRefused (401, 403, 429 or 503) otherwise."""
        credential = _bearer(authorization)
        key = hashlib.sha256(credential.encode()).hexdigest()
        hit = self._cache.get(key)
        if hit is not None and self._clock() - hit.at < self.ttl_s:
            return hit.name
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            name = await self._ask(credential, key, hit)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            future.set_result(name)
            return name
        finally:
            del self._pending[key]

    async def _ask(self, credential: str, key: str, hit: _Verified | None) -> str:
        try:
            reply = await self._controller.request("GET", "/whoami", bearer=credential, timeout_s=5.0)
        except ControllerUnreachable as exc:
            if hit is not None and self._clock() - hit.at < self.stale_s:
                return hit.name
            raise AuthRefused(503, f"cannot check the credential: no controller answers ({exc})") from None
        if reply.status == 200 and isinstance(reply.body, dict) and isinstance(reply.body.get("name"), str):
            self._remember(key, reply.body["name"])
            return str(reply.body["name"])
        self._cache.pop(key, None)
        if reply.status in (401, 403, 429):  # refused, or over the user's request rate (passed on as such)
            raise AuthRefused(reply.status, reply.detail())
        raise AuthRefused(503, f"cannot check the credential: the controller answered {reply.status}")

    def _remember(self, key: str, name: str) -> None:
        now = self._clock()
        if len(self._cache) >= MAX_CACHED:
            self._cache = {k: v for k, v in self._cache.items() if now - v.at < self.stale_s}
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
        self._cache[key] = _Verified(name, now)


def _bearer(authorization: str | None) -> str:
    if not authorization:
        raise AuthRefused(401, "this service needs a credential: send 'Authorization: Bearer <token>' "
                               "(corral token create)")
    scheme, _, credential = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        raise AuthRefused(401, "the Authorization header must be 'Bearer <token>'")
    return credential.strip()
