"""Slurm's time specifications (parse_time in src/common/parse_time.c), as sacct -S/-E take them:

- `now`, `now[+-]N[units]` (seconds by default; minutes, hours, days, weeks and their prefixes);
- `today`/`midnight`, `noon`, `tomorrow`;
- `YYYY-MM-DD[THH:MM[:SS]]`, `MM/DD[/YY][-HH:MM[:SS]]`, `MMDD[YY]`, `HH:MM[:SS]` (today).
Local time, as Slurm. Anything else fails with Slurm's message. `corral acct` and corral's
reservation windows (corral.cli.timespec) take their own set of forms, with this module's midnight
and unit lengths."""
from __future__ import annotations

import time

from corral.slurm.common.errors import SlurmCommandError

UNITS_S = (("seconds", 1), ("minutes", 60), ("hours", 3600), ("days", 86400), ("weeks", 7 * 86400))


def invalid(text: str) -> SlurmCommandError:
    return SlurmCommandError(f"Invalid time specification (pos=0): {text}\n", 1)


def parse_time(text: str, now: float) -> float:
    word = text.strip().lower()
    today = time.localtime(now)
    start = midnight(now)
    named = {"today": start, "midnight": start, "noon": start + 12 * 3600, "tomorrow": start + 86400, "now": now}
    if word in named:
        return named[word]
    if word.startswith("now") and word[3:4] in ("+", "-"):
        return now + _offset_s(word[4:], text) * (1 if word[3] == "+" else -1)
    try:
        return _calendar(word, today)
    except (ValueError, OverflowError):
        raise invalid(text) from None


def midnight(now: float) -> float:
    """The start of the local day containing `now`."""
    local = time.localtime(now)
    return time.mktime((local.tm_year, local.tm_mon, local.tm_mday, 0, 0, 0, 0, 0, -1))


def _offset_s(rest: str, text: str) -> int:
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    unit = rest[len(digits):]
    if not digits:
        raise invalid(text)
    if not unit:
        return int(digits)
    factor = next((f for name, f in UNITS_S if name.startswith(unit)), None)
    if factor is None:
        raise invalid(text)
    return int(digits) * factor


def _calendar(word: str, today: time.struct_time) -> float:
    date_part, clock = _split_clock(word)
    year, month, day = today.tm_year, today.tm_mon, today.tm_mday
    if "-" in date_part:
        year, month, day = (int(x) for x in date_part.split("-"))
    elif "/" in date_part:
        parts = [int(x) for x in date_part.split("/")]
        if len(parts) > 3:
            raise ValueError(date_part)
        month, day = parts[0], parts[1]
        year = _year(parts[2]) if len(parts) > 2 else year
    elif date_part:
        if not date_part.isdigit() or len(date_part) not in (4, 6):
            raise ValueError(date_part)
        month, day = int(date_part[:2]), int(date_part[2:4])
        year = _year(int(date_part[4:])) if len(date_part) == 6 else year
    hour, minute, second = clock
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 60):
        raise ValueError(word)
    return time.mktime((year, month, day, hour, minute, second, 0, 0, -1))


def _split_clock(word: str) -> tuple[str, tuple[int, int, int]]:
    """`2026-11-22T10:00` -> ("2026-11-22", (10, 0, 0)); `10:00` -> ("", ...); `11/22-10:00` too."""
    if "t" in word:
        date_part, _, clock_text = word.partition("t")
    elif ":" in word and "/" in word and "-" in word:
        date_part, _, clock_text = word.rpartition("-")
    elif ":" in word:
        date_part, clock_text = "", word
    else:
        date_part, clock_text = word, ""
    if not clock_text:
        return date_part, (0, 0, 0)
    fields = [int(x) for x in clock_text.split(":")]
    if not 2 <= len(fields) <= 3:
        raise ValueError(clock_text)
    return date_part, (fields[0], fields[1], fields[2] if len(fields) == 3 else 0)


def _year(value: int) -> int:
    return value + 2000 if value < 100 else value
