"""Slurm hostlist expressions: `node[1-3,05],gpu7` <-> ["node1", "node2", "node3", "node05", "gpu7"].

No imports but corral.jobref (itself import-free): the Slurm commands parse their node options with it
and must start fast. An expression
names at most MAX_HOSTS hosts (Slurm's hostlist caps a range at 64K hosts); the count is worked out
from the ranges before any name is made, so `n[1-100000000]` fails at once instead of building 10^8
strings."""
from __future__ import annotations

from corral.jobref import ascii_number

MAX_HOSTS = 65_536
_DIGITS = "0123456789"
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


def expand(expression: str, limit: int = MAX_HOSTS) -> list[str]:
    """Expand a hostlist expression, keeping zero padding, in the written order. Raises
    HostlistError if it is malformed or names more than `limit` hosts."""
    parts = [_parse_part(part) for part in _split(expression.strip()) if part]
    total = sum(_count(segments) for segments, _ in parts)
    if total > limit:
        raise HostlistError(f"hostlist {_shown(expression)} names more than {limit} hosts")
    hosts: list[str] = []
    for segments, tail in parts:
        hosts.extend(_names(segments, tail))
    return hosts


def _split(expression: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, start, depth = [], 0, 0
    for at, char in enumerate(expression):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth <= 0:
            parts.append(expression[start:at])
            start = at + 1
    parts.append(expression[start:])
    return parts


# A part is a list of (prefix, ranges) segments and a tail: `a[1-2]b[3]c` -> [("a", ..), ("b", ..)], "c".
# A range is (first, last, width): width is the zero padding of the first number.
Segment = tuple[str, list[tuple[int, int, int]]]


def _parse_part(part: str) -> tuple[list[Segment], str]:
    segments: list[Segment] = []
    rest = part
    while True:
        open_at = rest.find("[")
        if open_at < 0:
            if "]" in rest:
                raise HostlistError(f"unbalanced ']' in hostlist {_shown(part)}")
            return segments, rest
        close_at = rest.find("]", open_at)
        if close_at < 0:
            raise HostlistError(f"unbalanced '[' in hostlist {_shown(part)}")
        prefix, body = rest[:open_at], rest[open_at + 1:close_at]
        segments.append((prefix, [_range(item, part) for item in body.split(",")]))
        rest = rest[close_at + 1:]


def _range(item: str, part: str) -> tuple[int, int, int]:
    lo, dash, hi = item.partition("-")
    # ASCII digits only: int() reads "\u0661" and "1_0" as 1 and 10, other nodes' names.
    first, last = ascii_number(lo), ascii_number(hi) if dash else ascii_number(lo)
    if first is None or last is None:
        raise HostlistError(f"bad range {_shown(item)} in hostlist {_shown(part)}")
    if last < first:
        raise HostlistError(f"descending range {_shown(item)} in hostlist {_shown(part)}")
    return first, last, len(lo)


def _count(segments: list[Segment]) -> int:
    total = 1
    for _, ranges in segments:
        total *= sum(last - first + 1 for first, last, _ in ranges)
    return total


def _names(segments: list[Segment], tail: str) -> list[str]:
    names = [tail]
    for prefix, ranges in reversed(segments):
        names = [f"{prefix}{n:0{width}d}{after}" for first, last, width in ranges
                 for n in range(first, last + 1) for after in names]
    return names


def _shown(text: str, limit: int = 80) -> str:
    """The user's text in a message, cut short: a bad expression may be megabytes long."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _trailing_number(host: str) -> tuple[str, str] | None:
    """`node012` -> ("node", "012"); None without trailing digits."""
    cut = len(host.rstrip(_DIGITS))  # ASCII digits: another script's are part of the name
    if cut == len(host):
        return None
    return host[:cut], host[cut:]


def sort_key(host: str) -> tuple[str, int, str]:
    """Slurm's order of hosts: by prefix, then by number (node2 before node10)."""
    split = _trailing_number(host)
    return (split[0], int(split[1]), host) if split else (host, -1, host)


def compress(hosts: list[str] | tuple[str, ...]) -> str:
    """Compress names into Slurm's form, as Slurm prints it: sorted by prefix and number, ranges merged."""
    groups: dict[str, list[tuple[int, int]]] = {}
    plain: list[str] = []
    order: list[str] = []
    for host in dict.fromkeys(hosts):
        split = _trailing_number(host)
        if split is None:
            plain.append(host)
            continue
        prefix, digits = split
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
            ranges.append(_range_text(start, prev))
            start = prev = cur
        ranges.append(_range_text(start, prev))
        if len(nums) == 1:
            parts.append(f"{prefix}{ranges[0]}")
        else:
            parts.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + sorted(plain))


def _range_text(start: tuple[int, int], end: tuple[int, int]) -> str:
    a = f"{start[0]:0{start[1]}d}"
    if start == end:
        return a
    return f"{a}-{end[0]:0{end[1]}d}"
