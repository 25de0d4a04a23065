"""Slurm hostlist expressions: `node[1-3,05],gpu7` <-> ["node1", "node2", "node3", "node05", "gpu7"]."""
from __future__ import annotations

import re

from corral.limits import LIST_MAX_ITEMS

_SPLIT = re.compile(r",(?![^\[]*\])")  # commas outside brackets
_TRAILING_NUM = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    pass


def expand(expression: str) -> list[str]:
    """Expand a hostlist expression, keeping zero padding, in the written order."""
    hosts: list[str] = []
    for part in _SPLIT.split(expression.strip()):
        if not part:
            continue
        hosts.extend(_expand_part(part, LIST_MAX_ITEMS - len(hosts)))
    return hosts


def _expand_part(part: str, room: int) -> list[str]:
    """The names of one comma-free part; more than `room` of them is an error (a typo such as
    `node[1-100000000]` would otherwise take the memory of the machine)."""
    open_at = part.find("[")
    if open_at < 0:
        if "]" in part:
            raise HostlistError(f"unbalanced ']' in hostlist {part!r}")
        return [part]
    close_at = part.find("]", open_at)
    if close_at < 0:
        raise HostlistError(f"unbalanced '[' in hostlist {part!r}")
    prefix, body, rest = part[:open_at], part[open_at + 1 : close_at], part[close_at + 1 :]
    tails = _expand_part(rest, room) if rest else [""]
    out: list[str] = []
    for item in body.split(","):
        lo, _, hi = item.partition("-")
        if not lo.isdecimal() or (hi and not hi.isdecimal()):
            raise HostlistError(f"bad range {item!r} in hostlist {part!r}")
        width = len(lo)
        end = int(hi) if hi else int(lo)
        if end < int(lo):
            raise HostlistError(f"descending range {item!r} in hostlist {part!r}")
        if len(out) + (end - int(lo) + 1) * len(tails) > room:
            raise HostlistError(f"hostlist {part!r} names more than {LIST_MAX_ITEMS} hosts")
        for n in range(int(lo), end + 1):
            out.extend(f"{prefix}{n:0{width}d}{tail}" for tail in tails)
    return out


def sort_key(host: str) -> tuple[str, int, str]:
    """Slurm's order of hosts: by prefix, then by number (node2 before node10)."""
    m = _TRAILING_NUM.match(host)
    return (m.group(1), int(m.group(2)), host) if m else (host, -1, host)


def compress(hosts: list[str] | tuple[str, ...]) -> str:
    """Compress names into Slurm's form, as Slurm prints it: sorted by prefix and number, ranges merged."""
    groups: dict[str, list[tuple[int, int]]] = {}
    plain: list[str] = []
    order: list[str] = []
    for host in dict.fromkeys(hosts):
        m = _TRAILING_NUM.match(host)
        if not m:
            plain.append(host)
            continue
        prefix, digits = m.group(1), m.group(2)
        key = prefix
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append((int(digits), len(digits)))
    parts: list[str] = []
    for prefix in sorted(order):
        nums = sorted(set(groups[prefix]))
        ranges: list[str] = []
        start = prev = nums[0]
        for cur in nums[1:]:
            if cur[0] == prev[0] + 1 and cur[1] == prev[1]:
                prev = cur
                continue
            ranges.append(_range(start, prev))
            start = prev = cur
        ranges.append(_range(start, prev))
        if len(nums) == 1:
            parts.append(f"{prefix}{ranges[0]}")
        else:
            parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + sorted(plain))


def _range(start: tuple[int, int], end: tuple[int, int]) -> str:
    a = f"{start[0]:0{start[1]}d}"
    if start == end:
        return a
    return f"{a}-{end[0]:0{end[1]}d}"
