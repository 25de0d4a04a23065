"""Per-user request rate limits: Slurm's rl_enable token bucket (src/slurmctld/rate_limit.c), so that many
clients polling the controller cannot take the event loop away from scheduling.

Each user has a bucket of `bucket_size` tokens; a request takes one, and `refill_rate` tokens come back at
every whole `refill_period_s` (as Slurm counts them: periods since the epoch, so a burst is allowed, a
sustained rate above refill_rate / refill_period_s is not). A user's first request finds a full bucket. The
table holds at most `table_size` users: the least recently seen one gives its place to a newcomer (it gets
a full bucket if it comes back; Slurm instead stops limiting newcomers once its table is full).

Everything runs on the controller's event loop, which is single-threaded: no lock, O(1) per request (a
dict lookup and a move to the end of an ordered dict).

A request costs one token whatever it asks for, so the load the limit lets through is users x refill rate
requests, each as costly as it is: a job list of 8,000 records costs the loop a thousand times what one
job costs. A list therefore also costs a token per `records_per_token` records it encodes (`charge`),
taken after it was answered: a bucket may go into debt, and the user's next requests wait until the
refills have repaid it. Slurm has no such charge; 0 turns it off."""
from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("corral.controller.ratelimit")

# What Slurm's commands print when its controller says SLURMCTLD_COMMUNICATIONS_BACKOFF.
RATE_LIMITED = "Rate limit exceeded, please retry momentarily"
# At most one log line per this many seconds about refused requests (Slurm's rl_log_freq, in time).
LOG_EVERY_S = 10.0


@dataclass(frozen=True, slots=True)
class RateLimitSettings:
    """The config's [ratelimit] section (docs/configuration.md); the defaults are Slurm's."""

    enabled: bool = False
    bucket_size: int = 30
    refill_rate: int = 2
    refill_period_s: int = 1
    table_size: int = 8192
    records_per_token: int = 1000  # a job list costs a token more per this many records (0: no charge)


class _Bucket:
    __slots__ = ("backlog", "period", "tokens")

    def __init__(self, period: int, tokens: int) -> None:
        self.period = period  # the refill period in which tokens were last counted
        self.tokens = tokens
        # Refused requests told to come back that the refills since have not yet made room for: the next
        # refused one is told to wait behind them, so that a user's many clients do not all come back in
        # the same second to be refused again (they would cost the controller more than the requests).
        self.backlog = 0


class RateLimiter:
    def __init__(self, settings: RateLimitSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._refused_since_log = 0
        self._last_log = -math.inf

    def __len__(self) -> int:
        return len(self._buckets)

    def retry_after_s(self, who: str) -> float | None:
        """Take one of `who`'s tokens: None if there was one, else how long to wait (until the refill that
        makes room for this request after those refused before it)."""
        settings = self.settings
        now = self._clock()
        period = int(now // settings.refill_period_s)
        bucket = self._buckets.get(who)
        if bucket is None:
            if len(self._buckets) >= settings.table_size:
                self._buckets.popitem(last=False)
            self._buckets[who] = _Bucket(period, settings.bucket_size - 1)
            return None
        self._buckets.move_to_end(who)
        if period > bucket.period:
            refilled = (period - bucket.period) * settings.refill_rate
            bucket.tokens = min(settings.bucket_size, bucket.tokens + refilled)
            bucket.backlog = max(0, bucket.backlog - refilled)
            bucket.period = period
        if bucket.tokens > 0:
            bucket.tokens -= 1
            return None
        self._refused(who, now)
        # The refills that repay the debt and make room for those refused before, then for this one.
        needed = -bucket.tokens + bucket.backlog + 1
        bucket.backlog += 1
        return (period + math.ceil(needed / settings.refill_rate)) * settings.refill_period_s - now

    def charge(self, who: str, records: int) -> None:
        """What a list of `records` records costs beyond its request's token (records_per_token each)."""
        per = self.settings.records_per_token
        bucket = self._buckets.get(who)
        if per > 0 and bucket is not None:
            bucket.tokens -= records // per

    def _refused(self, who: str, now: float) -> None:
        self._refused_since_log += 1
        if now - self._last_log >= LOG_EVERY_S:
            log.warning("request rate limit exceeded by %s, telling them to back off (%d request(s) refused "
                        "since the last such line)", who, self._refused_since_log)
            self._refused_since_log, self._last_log = 0, now
