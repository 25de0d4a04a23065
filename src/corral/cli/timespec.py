"""Points in time: for `corral acct --since/--until` in the forms sacct users type, and for reservation
windows in the forms scontrol takes (now+1h, ISO local time, epoch seconds). Slurm's own parser
(corral.slurm.common.timespec: sacct -S/-E, sbatch --begin) takes other forms (noon, MM/DD, unit
prefixes); its midnight and unit lengths are these ones."""
from __future__ import annotations

import re
from datetime import datetime

from corral.cli.errors import CliError
from corral.slurm.common.timespec import UNITS_S, midnight

_UNIT_SECONDS = {name[0]: seconds for name, seconds in UNITS_S}  # s, m, h, d, w
# `now-2hours`, `now-30min`, or just `2h` (that long ago). Unit words are read by their first letter.
_RELATIVE = re.compile(r"(?:now\s*-\s*)?(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)")
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")
FORMS_HELP = "epoch seconds, YYYY-MM-DD[THH:MM[:SS]], HH:MM[:SS] (today), today, midnight, now, now-2hours, 2h"
# scontrol's `now[+count[unit]]`: seconds unless a unit says otherwise.
_AHEAD = re.compile(r"now\s*\+\s*(\d+)\s*(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)?")
AHEAD_FORMS_HELP = ("now, now+N with an optional unit s, m, h, d or w (seconds by default, e.g. now+1h), "
                    "YYYY-MM-DDTHH:MM[:SS] (local time), epoch seconds")


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


def parse_when_ahead(text: str, now: float) -> float:
    """Epoch seconds for a time to come: `now`, `now+1h`, ISO date and time (local), epoch seconds."""
    cleaned = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", cleaned):
        return float(cleaned)
    if cleaned == "now":
        return now
    ahead = _AHEAD.fullmatch(cleaned)
    if ahead:
        return now + int(ahead.group(1)) * _UNIT_SECONDS[(ahead.group(2) or "s")[0]]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise CliError(f"invalid time {text!r}: expected {AHEAD_FORMS_HELP}") from None

