"""Job arrays: Slurm's `--array` forms (`0-99%8`, `1,3,5`, `0-15:4`, mixed), expanded to task indices."""
from __future__ import annotations

import re

from corral.jobref import ascii_number
from corral.limits import ARRAY_INDEX_MAX, MAX_ARRAY_SIZE

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")  # ASCII digits: `\d` takes any script's


class ArrayError(ValueError):
    pass


def parse_array(text: str) -> tuple[list[int], int | None]:
    """(sorted task indices, throttle or None)."""
    body, _, throttle_text = text.strip().partition("%")
    throttle = None
    if throttle_text:
        throttle = ascii_number(throttle_text)
        if not throttle:
            raise ArrayError(f"invalid array throttle {throttle_text!r} in --array={text}")
    indices: set[int] = set()
    for part in body.split(","):
        m = _RANGE.fullmatch(part.strip())
        if not m:
            raise ArrayError(f"invalid array element {part!r} in --array={text}")
        lo = ascii_number(m.group(1))
        hi = ascii_number(m.group(2)) if m.group(2) else lo
        step = ascii_number(m.group(3)) if m.group(3) else 1
        if lo is None or hi is None or step is None:
            raise ArrayError(f"array index too large in {part!r} in --array={text}")
        if hi < lo or step < 1:
            raise ArrayError(f"invalid array range {part!r} in --array={text}")
        if hi > ARRAY_INDEX_MAX:
            raise ArrayError(f"--array={text}: index {hi} is above the largest allowed, {ARRAY_INDEX_MAX}")
        if hi >= MAX_ARRAY_SIZE:  # checked before the range is made
            raise ArrayError(f"invalid array index {hi} in --array={text}: task indices go up to "
                             f"{MAX_ARRAY_SIZE - 1} (MaxArraySize={MAX_ARRAY_SIZE})")
        indices.update(range(lo, hi + 1, step))
    return sorted(indices), throttle
