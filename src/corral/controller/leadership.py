"""Which of the controllers sharing a database leads: the lease loop (docs/decisions/0016-standby-controllers.md).

A standby tries to take the lease every STANDBY_TRY_S; the leader renews it every RENEW_EVERY_S for
LEASE_TTL_S from the database's clock. The leader trusts its lease only until its own monotonic clock says
LEASE_TTL_S - MARGIN_S have passed since it sent the last renewal that succeeded: then, renewed or not
(the renewal may hang on a cut-off network, or the process may have been paused), it stops at once, before
anyone can have taken over. On SQLite (one host) a lease is held for the life of its process: a standby
takes over when the leader's process has exited, and a paused leader keeps leading.

The store's writes are fenced by the epoch (store.lease): whatever this loop believes, a controller whose
lease moved on cannot commit anything.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from corral.store import Store, StoreError
from corral.store.lease import NOT_LEADER, ControllerView, Holder, Leases, LeaseView

log = logging.getLogger("corral.controller.leadership")

R = TypeVar("R")

LEASE_TTL_S = 3.0
RENEW_EVERY_S = 1.0
STANDBY_TRY_S = 0.5
MARGIN_S = 0.5
# Controllers not heard of for this long leave the registry (status stops listing them).
FORGET_AFTER_S = 10.0


class NotLeader(Exception):
    """This controller does not lead: the request goes to `leader_url` (HTTP 421)."""

    def __init__(self, leader_url: str | None) -> None:
        self.leader_url = leader_url or None
        super().__init__(f"not the leader: the leader is {leader_url}" if leader_url
                         else "not the leader: no controller leads now")


class Leadership:
    """The lease loop of one controller. `on_lead(term)` runs (as a task) when it takes the lease, with
    the term that says whether it still holds it (`holds(term)`); `on_lose(reason)` when it stops leading."""

    def __init__(self, store: Store, url: str, *, ttl_s: float = LEASE_TTL_S, renew_s: float = RENEW_EVERY_S,
                 try_s: float = STANDBY_TRY_S, margin_s: float = MARGIN_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.leases = Leases(store.engine)
        self.me = Holder.this_process(url)
        self.ttl_s, self.renew_s, self.try_s, self.margin_s = ttl_s, renew_s, try_s, margin_s
        self._monotonic = monotonic
        self.leading = False
        self.epoch = 0  # the epoch held while leading, else the last one seen
        self.leader_url: str | None = None
        self.problem: str | None = None  # why the last turn could not reach the lease (a store error)
        self.term = 0  # grows at every change of role
        self._valid_until = 0.0
        self._watchdog: asyncio.TimerHandle | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="corral-lease")
        self.on_lead: Callable[[int], Coroutine[None, None, None]] | None = None
        self.on_lose: Callable[[str], None] | None = None
        self._takeover: asyncio.Task | None = None
        self._stopped = False

    @property
    def url(self) -> str:
        return self.me.url

    def holds(self, term: int) -> bool:
        return self.leading and self.term == term

    def proven(self) -> bool:
        """Whether this controller may act as the leader now: it holds the lease and, where leases expire
        by time, its own clock says the lease cannot have expired yet."""
        if not self.leading:
            return False
        return not self.leases.expires_by_time or self._monotonic() < self._valid_until

    async def _call(self, function: Callable[..., R], *args) -> R:
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    # ----- the loop

    async def run(self) -> None:
        while True:
            await self.turn()
            await asyncio.sleep(self.renew_s if self.leading else self.try_s)

    async def first_turn(self) -> None:
        """The turn at start: when it takes the lease, it returns once the takeover is done."""
        await self.turn()
        if self._takeover is not None:
            await self._takeover

    async def turn(self) -> None:
        """One turn: renew the lease (leader) or try to take it (standby), then say so in the registry."""
        try:
            if self.leading:
                await self._renew()
            else:
                await self._try_to_lead()
            self.problem = None
        except StoreError as exc:
            if self.problem is None:
                log.warning("the leader lease cannot be reached: %s", exc)
            self.problem = str(exc)
            return
        try:
            await self._call(self.leases.heartbeat, self.me, "leader" if self.leading else "standby", self.epoch,
                             FORGET_AFTER_S)
        except StoreError as exc:
            log.debug("controllers' registry not updated: %s", exc)

    async def _try_to_lead(self) -> None:
        sent = self._monotonic()
        taken, lease = await self._call(self.leases.try_acquire, self.me, self.ttl_s)
        self.epoch, self.leader_url = lease.epoch, (lease.url if lease.holder else None)
        if not taken:
            return
        self.store.fence(lease.epoch)
        self.leading, self.term = True, self.term + 1
        self._trusted_until(sent)
        log.info("this controller (%s) leads now, epoch %d", self.url, lease.epoch)
        if self.on_lead is not None:
            self._takeover = asyncio.create_task(self.on_lead(self.term), name="corral-takeover")

    async def _renew(self) -> None:
        sent, term = self._monotonic(), self.term
        renewed = await self._call(self.leases.renew, self.epoch, self.ttl_s)
        if not self.holds(term):
            return  # stepped down meanwhile: this renewal proves nothing
        if not renewed:
            self.step_down(f"the lease of epoch {self.epoch} moved to another controller")
        elif not self.proven():  # renewed too late: it could not be proven meanwhile (a pause)
            self.step_down(f"the lease of epoch {self.epoch} could not be renewed in time")
        else:
            self._trusted_until(sent)

    def _trusted_until(self, sent: float) -> None:
        """The renewal sent at `sent` succeeded: the lease lasts at least until sent + ttl in the database's
        clock; this controller trusts it until sent + ttl - margin in its own."""
        self._valid_until = sent + self.ttl_s - self.margin_s
        if not self.leases.expires_by_time:
            return
        if self._watchdog is not None:
            self._watchdog.cancel()
        delay = max(0.0, self._valid_until - self._monotonic())
        self._watchdog = asyncio.get_running_loop().call_later(delay, self._expired)

    def _expired(self) -> None:
        self._watchdog = None
        if self.leading and self._monotonic() >= self._valid_until:
            self.step_down(f"the lease of epoch {self.epoch} could not be renewed in time")

    def step_down(self, reason: str, leader_url: str | None = None) -> None:
        """Stop leading at once: nothing more is written (the store's fence), the engine goes (on_lose).
        `leader_url`: who leads now, if known (the next turn finds out)."""
        if not self.leading:
            return
        self.store.fence(NOT_LEADER)
        self.leading, self.term, self.leader_url = False, self.term + 1, leader_url
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        log.warning("this controller (%s) stops leading: %s", self.url, reason)
        if self.on_lose is not None:
            self.on_lose(reason)

    async def stop(self) -> None:
        """Give the lease up (a standby takes over at once) and leave the registry."""
        if self._stopped:
            return
        self._stopped = True
        if self._takeover is not None:
            self._takeover.cancel()
        epoch, leading = self.epoch, self.leading
        self.step_down("stopping")
        try:
            if leading:
                await self._call(self.leases.release, epoch)
            await self._call(self.leases.forget, self.me)
        except StoreError as exc:
            log.warning("could not give the leader lease up: %s", exc)
        self._thread.shutdown(wait=False)

    # ----- status

    async def status(self) -> dict:
        """This controller's role, epoch, pid and URL, the leader's URL, and every registered controller."""
        body: dict = {"role": "leader" if self.leading else "standby", "epoch": self.epoch, "pid": self.me.pid,
                      "url": self.url, "leader": self.url if self.leading else self.leader_url, "controllers": []}
        try:
            lease, controllers = await self._call(self.leases.controllers)
        except StoreError as exc:
            return {**body, "detail": str(exc)}
        if not self.leading:
            body["leader"] = _leader_url(lease, controllers)
        body["controllers"] = [_controller_json(c) for c in controllers]
        return body


def _leader_url(lease: LeaseView, controllers: list[ControllerView]) -> str | None:
    return next((c.url for c in controllers if c.role == "leader"), None) or (lease.url if lease.held else None)


def _controller_json(c: ControllerView) -> dict:
    return {"url": c.url, "role": c.role, "epoch": c.epoch, "pid": c.pid, "last_seen": c.last_seen}
