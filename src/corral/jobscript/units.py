"""Slurm's units: time limits, memory sizes, elapsed-time formatting.

Unlimited time limits ("UNLIMITED", "INFINITE", "-1", "0") are rejected: corral's backfill plans
with every running job's end (start + limit), so a job must state a finite limit or leave --time
out and get its partition's default.
"""
from __future__ import annotations

from corral.durations import format_duration, format_duration_short  # noqa: F401 (re-exported)
from corral.jobscript.errors import DirectiveError
from corral.limits import MEM_MIB_MAX, TIME_LIMIT_S_MAX

_UNLIMITED_WORDS = frozenset({"unlimited", "infinite", "-1"})
# Slurm's time forms (src/common/parse_time.c: time_str2secs): the seconds per field of
# `M`, `M:S`, `H:M:S` and, after `D-`, of `H`, `H:M`, `H:M:S`. Each field is `\d+` (str.isdecimal).
# Parsed by hand, not with `re`: sbatch parses --time on most submissions, and `re` (with enum)
# costs it ~7 ms of start-up.
_TIME_FIELDS = {1: (60,), 2: (60, 1), 3: (3600, 60, 1)}
_DAY_TIME_FIELDS = {1: (3600,), 2: (3600, 60), 3: (3600, 60, 1)}
TIME_FORMS_HELP = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"

_MIB_PER_UNIT = {"": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
MEM_FORMS_HELP = "N (MiB) or N with a K, M, G or T suffix, optionally followed by B"


def parse_time_s(text: str) -> int:
    """A Slurm time limit in seconds: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M` or `D-H:M:S`.

    Seconds are kept (Slurm rounds up to whole minutes); a zero or unlimited limit is an error."""
    cleaned = text.strip()
    if cleaned.lower() in _UNLIMITED_WORDS or _is_zero_time(cleaned):
        reason = (
            "unlimited time limits are not supported: corral's backfill needs a finite limit; "
            "give one (e.g. 7-00:00:00) or leave --time out for the partition's default"
        )
        raise DirectiveError(f"invalid time limit {text!r}: {reason}", reason)
    seconds = _time_form_s(cleaned)
    if seconds is not None and seconds > TIME_LIMIT_S_MAX:
        reason = f"longer than the longest time limit corral takes, {TIME_LIMIT_S_MAX} seconds (about 68 years)"
        raise DirectiveError(f"invalid time limit {text!r}: {reason}", reason)
    if seconds is not None:
        return seconds
    reason = f"expected {TIME_FORMS_HELP}"
    raise DirectiveError(f"invalid time limit {text!r}: {reason}", reason)


def _time_form_s(text: str) -> int | None:
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    parts = rest.split(":")
    weights = (_DAY_TIME_FIELDS if dash else _TIME_FIELDS).get(len(parts))
    if weights is None or not days.isdecimal() or not all(part.isdecimal() for part in parts):
        return None
    return int(days) * 86400 + sum(int(part) * weight for part, weight in zip(parts, weights, strict=True))


def _is_zero_time(text: str) -> bool:
    # Slurm reads a limit of zero as "no limit"; any all-zero spelling ("0", "00:00:00") counts.
    return bool(text) and set(text) <= set("0:-") and any(c == "0" for c in text)


def parse_mem_mib(text: str) -> int:
    """A Slurm memory size in MiB: `N` is MiB; K, M, G, T suffixes (any case, optional B) are
    1024-based. Kibibytes round up to a whole MiB, as Slurm does."""
    # `(\d+)([KMGT]?)B?`, any case.
    cleaned = text.strip()
    number = cleaned.rstrip("Bb")
    if len(cleaned) - len(number) > 1:
        number = cleaned  # only one B; let the check below refuse it
    unit = number[-1:].upper() if number[-1:].upper() in ("K", "M", "G", "T") else ""
    number = number[: len(number) - len(unit)]
    if not number.isdecimal():
        reason = f"expected {MEM_FORMS_HELP}"
        raise DirectiveError(f"invalid memory size {text!r}: {reason}", reason)
    amount = int(number)
    mib = -(-amount // 1024) if unit == "K" else amount * _MIB_PER_UNIT[unit]
    if mib > MEM_MIB_MAX:
        reason = f"more than the largest memory size corral takes, {MEM_MIB_MAX} MiB (2 PiB)"
        raise DirectiveError(f"invalid memory size {text!r}: {reason}", reason)
    return mib
