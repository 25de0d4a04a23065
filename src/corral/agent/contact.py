"""The agent's contact with the controller, written where the node's task leaders read it: they freeze their
tasks while it is older than the controller's `fence_after_s`, and thaw them once it is fresh again
(self-fencing, decision 0017).

Contact is the send time of the agent's last request that a leading controller answered with success (a
registration, a command poll, an event batch): the controller heard from the agent no earlier than that,
so a node whose leaders have fenced by `contact + fence_after_s` is clean before the controller declares it
down at `last heard + node_timeout_s`. The time is CLOCK_BOOTTIME (the leaders are on the same host and read
the same clock; unlike CLOCK_MONOTONIC it runs on while the host is suspended, which is silence too).

The file (`<spool>/contact`, JSON: fence_after_s, contact) is replaced whole. It is written at the first
registration and then when the contact has moved on by `min(1 s, fence_after_s / 10)`: a skipped write only
makes the file older than the truth, so leaders fence early, never late. Until this agent has registered it
leaves the file alone: an earlier agent's contact (and the fencing it calls for) stands.

A fresh contact thaws every frozen task, so it is written only once the agent has done what the controller
answered: while the agent registers (again), no contact is written until it has killed the jobs the
registration reply disowns (`registering`, then `registered`). A controller that declared the node down
refuses its other requests (409) until then, so no other reply can thaw a job it gave away.
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

CLOCK = time.CLOCK_BOOTTIME
WRITE_EVERY_S = 1.0


def now() -> float:
    return time.clock_gettime(CLOCK)


class Contact:
    """What the agent last heard from a leading controller, kept in `path` for the task leaders."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fence_after_s: float | None = None
        self._registered = False
        self._registering = False  # a registration is under way: no contact until its reply is carried out
        self._written = -1.0  # the contact last written

    def registering(self) -> None:
        """The agent registers (again): until `registered`, no reply moves the contact on."""
        self._registering = True

    def registered(self, fence_after_s: float | None, sent_at: float) -> None:
        """A registration sent at `sent_at` was accepted and its reply carried out (the jobs it disowns are
        dead); the reply says how long the node may be silent."""
        changed = fence_after_s != self.fence_after_s or not self._registered
        self.fence_after_s, self._registered, self._registering = fence_after_s, True, False
        if changed:
            log.info("self-fencing: %s", "off (the controller never declares a node down)" if fence_after_s is None
                     else f"tasks are frozen after {fence_after_s:g} s without contact with the controller, "
                     "and thawed when it is back")
        self._write(sent_at)

    def made(self, sent_at: float) -> None:
        """A request sent at `sent_at` got a successful reply from the leader."""
        if not self._registered or self._registering:
            return
        every = WRITE_EVERY_S if self.fence_after_s is None else min(WRITE_EVERY_S, self.fence_after_s / 10)
        if sent_at - self._written >= every:
            self._write(sent_at)

    def _write(self, sent_at: float) -> None:
        if sent_at < self._written:
            return
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary.write_text(json.dumps({"fence_after_s": self.fence_after_s, "contact": sent_at}))
            os.replace(temporary, self.path)
        except OSError as exc:  # the leaders fence early (their file is older): loud, not fatal
            log.error("cannot record the contact with the controller in %s: %s", self.path, exc)
            return
        self._written = sent_at
