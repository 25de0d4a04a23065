"""Following the leader among several controllers: the one rule for the Slurm commands, the `corral` CLI and
the SDK client, whatever their transport (docs/configuration.md, "Several controllers").

A request goes to the last known leader first (remembered in memory only), then to the others in the
configured order. A controller that refuses the connection, or a standby that answers 421 "not the leader",
moves the request on: to the leader the standby names (X-Corral-Leader), else to the next controller. When a
standby answered but none leads (an election is under way), the round starts again after a short pause, for
up to DEFAULT_LEADER_WAIT_S seconds (`CORRAL_LEADER_WAIT_S` overrides it); when every controller refused the
connection, it fails at once, naming every URL and what each said.

A request is sent again only when no controller can have acted on it: its connection failed before it was
sent, or a standby refused it (421). A timeout or a reset once it was sent ends it with an error, though
another controller might answer: a submission must never be made twice.

Stdlib-only and light: the Slurm commands import it (tests/slurm/test_imports.py)."""
from __future__ import annotations

import os
import time
from _collections_abc import Callable, Iterable, Mapping

LEADER_HEADER = "X-Corral-Leader"  # names the leader's URL on a standby's 421, when it knows it
NOT_LEADER_STATUS = 421  # HTTP 421 Misdirected Request: what a standby answers
DEFAULT_LEADER_WAIT_S = 10.0
LEADER_WAIT_ENV = "CORRAL_LEADER_WAIT_S"
RETRY_PAUSE_S = 0.2


class NotLeader(Exception):
    """A standby refused the request (421); `leader` is the URL it names, or None during an election."""

    def __init__(self, url: str, leader: str | None, detail: str = "") -> None:
        super().__init__(detail or f"not the leader: the leader is {leader or 'not known yet'}")
        self.url = url
        self.leader = leader.strip().rstrip("/") if leader and leader.strip() else None


class NotSent(Exception):
    """The connection failed before the request was sent (refused, no route, no such host): no controller
    can have acted on it."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(reason)
        self.url = url
        self.reason = reason


class NoLeader(Exception):
    """No controller took the request; `said` maps every URL tried to what it answered."""

    def __init__(self, said: Mapping[str, str], waited_s: float | None) -> None:
        self.said = dict(said)
        self.waited_s = waited_s
        if len(self.said) == 1:  # one controller: its own words, as before there were several
            self.reason = next(iter(self.said.values()))
        else:
            self.reason = "; ".join(f"{url}: {what}" for url, what in self.said.items())
        if waited_s is not None:
            self.reason = f"no controller became the leader within {waited_s:g} s ({self.reason})"
        super().__init__(self.reason)


def leader_wait_s(env: Mapping[str, str] = os.environ) -> float:
    """How long a request waits for an election; ValueError with a complete message for a bad value."""
    text = env.get(LEADER_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_LEADER_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ValueError(f"{LEADER_WAIT_ENV}={text!r}: expected a number of seconds, 0 or more")
    return value


class Controllers:
    """The controllers one client knows, and which of them led when last asked."""

    def __init__(self, urls: Iterable[str], wait_s: float = DEFAULT_LEADER_WAIT_S,
                 sleep: Callable[[float], object] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.urls = tuple(url.rstrip("/") for url in urls)
        if not self.urls:
            raise ValueError("no controller URL")
        self.leader = self.urls[0]
        self.wait_s = wait_s
        self._sleep = sleep
        self._clock = clock

    def call(self, send: Callable[[str], object]) -> object:
        """send(url)'s result from the leader. `send` raises NotLeader or NotSent for a request no
        controller acted on; anything else it raises ends the call as it is. NoLeader if none took it."""
        said: dict[str, str] = {}
        deadline: float | None = None
        while True:
            heard_standby = False
            tried: set[str] = set()
            queue = [self.leader, *(url for url in self.urls if url != self.leader)]
            while queue:
                url = queue.pop(0)
                if url in tried:
                    continue
                tried.add(url)
                try:
                    result = send(url)
                except NotLeader as exc:
                    said[url] = str(exc)
                    heard_standby = True
                    if exc.leader and exc.leader not in tried:
                        queue.insert(0, exc.leader)  # it may be a controller this client was not told of
                    continue
                except NotSent as exc:
                    said[url] = exc.reason
                    continue
                self.leader = url
                return result
            if not heard_standby:  # nothing runs there: waiting would only delay the error
                raise NoLeader(said, None)
            now = self._clock()
            deadline = now + self.wait_s if deadline is None else deadline
            if now >= deadline:
                raise NoLeader(said, self.wait_s)
            self._sleep(min(RETRY_PAUSE_S, deadline - now))
