"""The controller's HTTP API as the gateway uses it (aiohttp), following the leader among several controllers
by the rule of slurm/common/leader.py: a refused connection or a standby's 421 moves the request on, to the
leader the standby names (X-Corral-Leader) or else to the next URL."""
from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from corral.protocol import API_PREFIX
from corral.slurm.common.leader import LEADER_HEADER, NOT_LEADER_STATUS


class ControllerUnreachable(Exception):
    """No controller answered (every URL refused, timed out, or is a standby with no leader)."""


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: Any  # the decoded JSON, or the text when it is not JSON

    def detail(self) -> str:
        if isinstance(self.body, dict) and "detail" in self.body:
            return str(self.body["detail"])
        return str(self.body)[:200]


class ControllerClient:
    def __init__(self, urls: Sequence[str], credential: str | None, session: aiohttp.ClientSession,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if not urls:
            raise ValueError("at least one controller URL is needed")
        self.urls = [u.rstrip("/") for u in urls]
        self.credential = credential
        self._session = session
        self._ssl = ssl_context
        self._leader = self.urls[0]

    async def request(self, method: str, path: str, *, bearer: str | None = None, json: Any = None,
                      params: dict[str, str] | None = None, timeout_s: float = 10.0) -> Reply:
        """`path` under /api/v1, sent with `bearer` (default: the gateway's own credential)."""
        credential = bearer if bearer is not None else self.credential
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        said: dict[str, str] = {}
        order = [self._leader] + [u for u in self.urls if u != self._leader]
        while order:
            url = order.pop(0)
            if url in said:
                continue
            try:
                async with self._session.request(
                        method, url + API_PREFIX + path, headers=headers, json=json, params=params,
                        ssl=self._ssl if self._ssl is not None else True,
                        timeout=aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 3.0))) as resp:
                    if resp.status == NOT_LEADER_STATUS:
                        said[url] = "a standby (421)"
                        leader = (resp.headers.get(LEADER_HEADER) or "").strip().rstrip("/")
                        if leader and leader not in said:
                            order.insert(0, leader)
                        continue
                    body = await _body(resp)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                said[url] = _reason(exc)
                continue
            self._leader = url
            return Reply(resp.status, body)
        raise ControllerUnreachable("; ".join(f"{u}: {w}" for u, w in said.items()))


async def _body(resp: aiohttp.ClientResponse) -> Any:
    text = await resp.text()
    if resp.content_type == "application/json":
        try:
            return await resp.json(content_type=None)
        except ValueError:
            return text
    return text


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
