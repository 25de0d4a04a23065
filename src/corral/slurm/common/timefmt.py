"""Slurm's time texts: timestamps (slurm_make_time_str), durations (secs2time_str, mins2time_str) and
squeue's shorter TIME form (_print_secs)."""
from __future__ import annotations

import time

from corral.durations import format_duration, format_duration_short  # noqa: F401 (used by callers)

ISO_FORMAT = "%Y-%m-%dT%H:%M:%S"  # Slurm's "%FT%T" (SLURM_TIME_FORMAT unset or "standard")
UNLIMITED = "UNLIMITED"
_SQUEUE_MAX_S = 365 * 24 * 3600  # squeue prints INVALID beyond a year, or below zero


def make_time_str(epoch: float | None, now: float, time_format: str | None = None, *, unset: str = "Unknown") -> str:
    """A timestamp in local time as Slurm prints it; `unset` stands for a time not set (0/None).

    `time_format` is SLURM_TIME_FORMAT: unset or "standard" gives ISO 8601; "relative" gives the
    day-relative form (an approximation of Slurm's: today, Ystday, Tomorr, weekday, date); any other
    value is a strftime pattern, as in Slurm."""
    if not epoch:
        return unset
    moment = time.localtime(epoch)
    if not time_format or time_format == "standard":
        return time.strftime(ISO_FORMAT, moment)
    if time_format == "relative":
        return _relative(moment, time.localtime(now))
    return time.strftime(time_format, moment)


def _relative(moment: time.struct_time, now: time.struct_time) -> str:
    # Whole days between the two dates, at noon so that DST changes do not matter.
    days = (time.mktime((*moment[:3], 12, 0, 0, 0, 0, -1)) - time.mktime((*now[:3], 12, 0, 0, 0, 0, -1))) // 86400
    if days == 0:
        return time.strftime("%H:%M:%S", moment)
    if days == -1:
        return time.strftime("Ystday %H:%M", moment)
    if days == 1:
        return time.strftime("Tomorr %H:%M", moment)
    if -7 < days < 7:
        return time.strftime("%a %H:%M", moment)
    if moment.tm_year == now.tm_year:
        return f"{moment.tm_mday} {time.strftime('%b %H:%M', moment)}"
    return f"{moment.tm_mday} {time.strftime('%b %Y', moment)}"


def elapsed(seconds: float | None) -> str:
    """secs2time_str: `HH:MM:SS`, or `D-HH:MM:SS` from one day on (sacct Elapsed, scontrol RunTime)."""
    if seconds is None:
        return UNLIMITED
    return format_duration(seconds)


def time_limit(seconds: float | None) -> str:
    """A time limit in the long form (sacct Timelimit, scontrol TimeLimit); None is UNLIMITED."""
    return UNLIMITED if seconds is None else format_duration(seconds)


def squeue_duration(seconds: float) -> str:
    """squeue's TIME forms (`M:SS`, `H:MM:SS`, `D-HH:MM:SS`), INVALID outside 0..365 days."""
    if seconds < 0 or seconds > _SQUEUE_MAX_S:
        return "INVALID"
    return format_duration_short(seconds)


def squeue_time_limit(seconds: float | None) -> str:
    return UNLIMITED if seconds is None else squeue_duration(seconds)


def ctime(epoch: float) -> str:
    """The line `squeue -l` and `sinfo -l` print first: C's ctime() without its newline."""
    return time.ctime(epoch)
