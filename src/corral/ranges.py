"""Slurm's compact form of integer sets (bit_fmt): `1-3,5,7-9`. Import-free: the Slurm commands use it."""
from __future__ import annotations


def compress_ranges(numbers) -> str:
    """Sorted, duplicates dropped, runs of consecutive numbers as `a-b`."""
    ordered = sorted(set(numbers))
    parts: list[str] = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        parts.append(str(ordered[start]) if start == end else f"{ordered[start]}-{ordered[end]}")
        start = end + 1
    return ",".join(parts)
