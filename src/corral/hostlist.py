"""Slurm hostlist expressions: `node[1-3,05],gpu7` <-> ["node1", "node2", "node3", "node05", "gpu7"]."""
from __future__ import annotations

import re

from corral.jobref import ascii_number

_SPLIT = re.compile(r",(?![^\[]*\])")  # commas outside brackets
# ASCII digits: `\d` also takes other scripts' digits, which int() reads as ASCII ones ("gpu\u0663"
# would compress to "gpu3", another node's name).
_TRAILING_NUM = re.compile(r"(.*?)([0-9]+)")
MAX_HOSTS = 65536  # one expression expands to at most this many names (Slurm's MAX_RANGE is 64K)


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_NAME_LENGTH = 253  # a DNS name's


class HostlistError(ValueError):
    pass


def check_node_name(name: str) -> str:
    """A node name that hostlists carry unchanged: ASCII letters, digits, `.`, `_` and `-`. A `,`, `[`,
    space or another script's digits would be read back as other names (`a,b` as two nodes)."""
    if not name or len(name) > MAX_NAME_LENGTH or not set(name) <= _NAME_CHARS or name[0] in "-.":
        raise HostlistError(f"invalid node name {name!r}: use 1 to {MAX_NAME_LENGTH} ASCII letters, digits, "
                            "'.', '_' and '-', starting with a letter or digit")
    return name


def expand(expression: str) -> list[str]:
    """Expand a hostlist expression, keeping zero padding, in the written order."""
    hosts: list[str] = []
    for part in _SPLIT.split(expression.strip()):
        if not part:
            continue
        hosts.extend(_expand_part(part))
        if len(hosts) > MAX_HOSTS:
            raise HostlistError(f"hostlist {expression!r} names more than {MAX_HOSTS} hosts")
    return hosts


def _expand_part(part: str) -> list[str]:
    open_at = part.find("[")
    if open_at < 0:
        if "]" in part:
            raise HostlistError(f"unbalanced ']' in hostlist {part!r}")
        return [part]
    close_at = part.find("]", open_at)
    if close_at < 0:
        raise HostlistError(f"unbalanced '[' in hostlist {part!r}")
    prefix, body, rest = part[:open_at], part[open_at + 1 : close_at], part[close_at + 1 :]
    tails = _expand_part(rest) if rest else [""]
    out: list[str] = []
    for item in body.split(","):
        lo, dash, hi = item.partition("-")
        start, end = ascii_number(lo), ascii_number(hi) if dash else ascii_number(lo)
        if start is None or end is None:
            raise HostlistError(f"bad range {item!r} in hostlist {part!r}")
        if end < start:
            raise HostlistError(f"descending range {item!r} in hostlist {part!r}")
        if (end - start + 1) * len(tails) + len(out) > MAX_HOSTS:
            raise HostlistError(f"hostlist {part!r} names more than {MAX_HOSTS} hosts")
        out.extend(f"{prefix}{n:0{len(lo)}d}{tail}" for n in range(start, end + 1) for tail in tails)
    return out


def sort_key(host: str) -> tuple[str, int, str]:
    """Slurm's order of hosts: by prefix, then by number (node2 before node10)."""
    m = _TRAILING_NUM.fullmatch(host)
    return (m.group(1), int(m.group(2)), host) if m else (host, -1, host)


def compress(hosts: list[str] | tuple[str, ...]) -> str:
    """Compress names into Slurm's form, as Slurm prints it: sorted by prefix and number, ranges merged."""
    groups: dict[str, list[tuple[int, int]]] = {}
    plain: list[str] = []
    order: list[str] = []
    for host in dict.fromkeys(hosts):
        m = _TRAILING_NUM.fullmatch(host)
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
