"""Slurm's units: time limits, memory sizes, elapsed-time formatting.

Unlimited time limits ("UNLIMITED", "INFINITE", "-1", "0") are rejected: corral's backfill plans
with every running job's end (start + limit), so a job must state a finite limit or leave --time
out and get its partition's default.
"""
from __future__ import annotations

import re

from corral.durations import format_duration, format_duration_short  # noqa: F401 (re-exported)
from corral.jobscript.errors import DirectiveError

_UNLIMITED_WORDS = frozenset({"unlimited", "infinite", "-1"})
_NUMBER = r"(\d+)"
# Slurm's time forms (src/common/parse_time.c: time_str2secs), as (regex, field names) pairs.
_TIME_FORMS: tuple[tuple[re.Pattern[str], tuple[str, ...]], ...] = tuple(
    (re.compile(pattern), fields)
    for pattern, fields in (
        (rf"{_NUMBER}", ("m",)),
        (rf"{_NUMBER}:{_NUMBER}", ("m", "s")),
        (rf"{_NUMBER}:{_NUMBER}:{_NUMBER}", ("h", "m", "s")),
        (rf"{_NUMBER}-{_NUMBER}", ("d", "h")),
        (rf"{_NUMBER}-{_NUMBER}:{_NUMBER}", ("d", "h", "m")),
        (rf"{_NUMBER}-{_NUMBER}:{_NUMBER}:{_NUMBER}", ("d", "h", "m", "s")),
    )
)
_SECONDS_PER = {"d": 86400, "h": 3600, "m": 60, "s": 1}
TIME_FORMS_HELP = "M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"

_MEM = re.compile(r"(\d+)([KMGT]?)B?", re.IGNORECASE)
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
    for pattern, fields in _TIME_FORMS:
        match = pattern.fullmatch(cleaned)
        if match:
            return sum(int(v) * _SECONDS_PER[f] for v, f in zip(match.groups(), fields, strict=True))
    reason = f"expected {TIME_FORMS_HELP}"
    raise DirectiveError(f"invalid time limit {text!r}: {reason}", reason)


def _is_zero_time(text: str) -> bool:
    # Slurm reads a limit of zero as "no limit"; any all-zero spelling ("0", "00:00:00") counts.
    return bool(text) and set(text) <= set("0:-") and any(c == "0" for c in text)


def parse_mem_mib(text: str) -> int:
    """A Slurm memory size in MiB: `N` is MiB; K, M, G, T suffixes (any case, optional B) are
    1024-based. Kibibytes round up to a whole MiB, as Slurm does."""
    match = _MEM.fullmatch(text.strip())
    if not match:
        reason = f"expected {MEM_FORMS_HELP}"
        raise DirectiveError(f"invalid memory size {text!r}: {reason}", reason)
    amount, unit = int(match.group(1)), match.group(2).upper()
    if unit == "K":
        return -(-amount // 1024)
    return amount * _MIB_PER_UNIT[unit]
