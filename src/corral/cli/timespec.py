"""Points in time for `corral acct --since/--until`, in the forms sacct users type."""
from __future__ import annotations

import re
import time
from datetime import datetime

from corral.cli.errors import CliError

_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# `now-2hours`, `now-30min`, or just `2h` (that long ago). Unit words are read by their first letter.
_RELATIVE = re.compile(r"(?:now\s*-\s*)?(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
FORMS_HELP = "epoch seconds, YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS] (today), today, midnight, now, now-2hours, 2h"


def parse_when(text: str, now: float) -> float:
    """Epoch seconds for `text`; local time for dates and clock times."""
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        return float(cleaned)
    if cleaned == "now":
        return now
    if cleaned in ("today", "midnight"):
        return midnight(now)
    relative = _RELATIVE.fullmatch(cleaned)
    if relative:
        return now - int(relative.group(1)) * _UNIT_SECONDS[relative.group(2)[0]]
    clock = _CLOCK.fullmatch(cleaned)
    if clock:
        hours, minutes, seconds = (int(g or 0) for g in clock.groups())
        if hours < 24 and minutes < 60 and seconds < 60:
            return midnight(now) + hours * 3600 + minutes * 60 + seconds
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise CliError(f"invalid time {text!r}: expected {FORMS_HELP}") from None


def midnight(now: float) -> float:
    """The start of the local day containing `now`."""
    local = time.localtime(now)
    return time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))
