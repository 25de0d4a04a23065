"""Slurm's time specifications (sacct -S/-E)."""
from __future__ import annotations

import time

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.timespec import parse_time


def local(*fields: int) -> float:
    return time.mktime((*fields, *(0,) * (6 - len(fields)), 0, 0, -1))


NOW = local(2026, 11, 22, 14, 30, 15)


@pytest.mark.parametrize(("text", "expected"), [
    ("now", NOW), ("NOW-1hours", NOW - 3600), ("now+90", NOW + 90), ("now-2days", NOW - 2 * 86400),
    ("now-1w", NOW - 7 * 86400), ("today", local(2026, 11, 22)), ("midnight", local(2026, 11, 22)),
    ("noon", local(2026, 11, 22, 12)), ("tomorrow", local(2026, 11, 23)),
    ("2026-01-02", local(2026, 1, 2)), ("2026-01-02T03:04", local(2026, 1, 2, 3, 4)),
    ("2026-01-02T03:04:05", local(2026, 1, 2, 3, 4, 5)), ("10:20", local(2026, 11, 22, 10, 20)),
    ("10:20:30", local(2026, 11, 22, 10, 20, 30)), ("01/02", local(2026, 1, 2)), ("01/02/25", local(2025, 1, 2)),
    ("01/02-03:04", local(2026, 1, 2, 3, 4)), ("0102", local(2026, 1, 2)), ("010225", local(2025, 1, 2)),
])
def test_times(text, expected):
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize("text", ["bogus", "now-", "now+1fortnights", "2026-13-01", "25:00", "123", "1/2/3/4"])
def test_invalid_times_read_as_slurms_message(text):
    with pytest.raises(SlurmCommandError) as caught:
        parse_time(text, NOW)
    assert (caught.value.stderr, caught.value.exit_code) == (f"Invalid time specification (pos=0): {text}\n", 1)
