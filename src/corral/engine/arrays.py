"""Job arrays: Slurm's `--array` forms (`0-99%8`, `1,3,5`, `0-15:4`, mixed), expanded to task indices."""
from __future__ import annotations

import re

from corral.limits import ARRAY_INDEX_MAX, ARRAY_TASKS_MAX, COUNT_MAX

MAX_ARRAY_TASKS = ARRAY_TASKS_MAX
_RANGE = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


class ArrayError(ValueError):
    pass


def parse_array(text: str) -> tuple[list[int], int | None]:
    """(sorted task indices, throttle or None)."""
    body, _, throttle_text = text.strip().partition("%")
    throttle = None
    if throttle_text:
        if not throttle_text.isdecimal() or not 1 <= int(throttle_text) <= COUNT_MAX:
            raise ArrayError(f"invalid array throttle {throttle_text!r} in --array={text}: it must be from 1 "
                             f"to {COUNT_MAX}")
        throttle = int(throttle_text)
    indices: set[int] = set()
    for part in body.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ArrayError(f"invalid array element {part!r} in --array={text}")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        step = int(m.group(3)) if m.group(3) else 1
        if hi < lo or step < 1:
            raise ArrayError(f"invalid array range {part!r} in --array={text}")
        if hi > ARRAY_INDEX_MAX:
            raise ArrayError(f"--array={text}: index {hi} is above the largest allowed, {ARRAY_INDEX_MAX}")
        if (hi - lo) // step + 1 + len(indices) > MAX_ARRAY_TASKS:
            raise ArrayError(f"--array={text} has more than {MAX_ARRAY_TASKS} tasks")
        indices.update(range(lo, hi + 1, step))
    return sorted(indices), throttle
