"""sinfo's output (sinfo/print.c, sinfo.c): nodes grouped per partition, and per state when the
format shows a state; `-N` prints one line per node and partition.

Records are PartitionOut and NodeOut dicts. Values that differ inside a group print as Slurm's
`min+` (`16+` CPUs). Widths of %P and, with -N, %N are widened to fit, as sinfo computes them
for its default formats."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral import gpu_models, hostlist
from corral.slurm.common import states, timefmt
from corral.slurm.common.formatspec import Column, Format, parse_percent_format
from corral.slurm.common.formatspec import header_line as _header_line
from corral.slurm.common.formatspec import record_line as _record_line
from corral.slurm.common.record import Record

DEFAULT_FORMAT = "%9P %.5a %.10l %.6D %.6t %N"
LONG_FORMAT = "%9P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"
NODE_FORMAT = "%N %.6D %.9P %6t"
NODE_LONG_FORMAT = "%N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"  # CPUS is left-justified in 22.05
MIN_FIELD_SIZE = 9  # MIN_NODE_FIELD_SIZE and MIN_PART_FIELD_SIZE


class Group(Record):
    """sinfo_data_t: nodes of one partition that print as one line."""

    partition: Mapping
    nodes: tuple[Mapping, ...]


class SinfoField(Record):
    header: str
    value: object  # Callable[[Group, None], str | None]
    cut: bool = True
    header_cut: bool = True


def _same_or_plus(values: Sequence[int]) -> str:
    """_build_min_max_32_string with a suffix: `16`, or `16+` when the group's values differ."""
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}+"


def _cpus_aiot(group: Group, _: object) -> str:
    alloc = sum(int(n.get("cpus_alloc", 0)) for n in group.nodes)
    total = sum(int(n.get("cpus", 0)) for n in group.nodes)
    # CPUs of nodes that take no work (down, drained, draining) count as "other", less what runs there.
    other = sum(int(n.get("cpus", 0)) - int(n.get("cpus_alloc", 0)) for n in group.nodes
                if n.get("state") in ("down", "drained", "draining"))
    return f"{alloc}/{total - alloc - other}/{other}/{total}"


def _partition_name(group: Group, _: object) -> str:
    return str(group.partition["name"]) + ("*" if group.partition.get("default") else "")


def _time_limit(seconds: int | None) -> str:
    return "infinite" if seconds is None else timefmt.squeue_duration(seconds)


def _gres(group: Group, _: object) -> str | None:
    """`gpu:h100:8` (the Slurm type of the devices' name: corral.gpu_models), `gpu:8` when the name has
    none; for a group whose nodes differ, its node with the fewest devices."""
    node = min(group.nodes, key=lambda n: len(n.get("gpus") or ()), default=None)
    gpus = (node.get("gpus") or ()) if node is not None else ()
    return gpu_models.gres(gpus[0].get("model") or "", len(gpus)) if gpus else None


def _state(compact: bool):
    def get(group: Group, _: object) -> str:
        names = [states.node_state_compact(n) if compact else states.node_state_long(n) for n in group.nodes]
        return names[0] if len(set(names)) == 1 else ("mix" if compact else "mixed")
    return get


def _per_node(name: str):
    return lambda group, _: _same_or_plus([int(n.get(name, 0)) for n in group.nodes])


def _field(header: str, value, header_cut: bool = True) -> SinfoField:
    return SinfoField(header, value, True, header_cut)


LETTERS: Mapping[str, SinfoField] = {
    "a": _field("AVAIL", lambda g, _: "up" if g.partition.get("up", True) else "down"),
    "A": _field("NODES(A/I)", lambda g, _: f"{_count(g, ('allocated', 'mixed', 'draining'))}/{_count(g, ('idle',))}"),
    "c": _field("CPUS", _per_node("cpus")),
    "C": _field("CPUS(A/I/O/T)", _cpus_aiot),
    "d": _field("TMP_DISK", lambda g, _: "0"),
    "D": _field("NODES", lambda g, _: str(len(g.nodes))),
    "E": _field("REASON", lambda g, _: str(g.nodes[0].get("drain_reason") or "none")),
    "f": _field("AVAIL_FEATURES", lambda g, _: _features(g.nodes[0])),
    "F": _field("NODES(A/I/O/T)", lambda g, _: _nodes_aiot(g)),
    "g": _field("GROUPS", lambda g, _: "all"),
    "G": _field("GRES", _gres),
    "h": _field("OVERSUBSCRIBE", lambda g, _: "NO"),
    # Who set a node's reason, and when: corral keeps neither, and sinfo prints this when it has none.
    "H": _field("TIMESTAMP", lambda g, _: "Unknown"),
    "I": _field("PRIO_JOB_FACTOR", lambda g, _: "1"),
    "l": _field("TIMELIMIT", lambda g, _: _time_limit(g.partition.get("max_time_s"))),
    "L": _field("DEFAULTTIME", lambda g, _: _time_limit(g.partition.get("default_time_s"))),
    "m": _field("MEMORY", _per_node("mem_mib")),
    "n": _field("HOSTNAMES", lambda g, _: hostlist.compress([n["name"] for n in g.nodes]), header_cut=False),
    "N": _field("NODELIST", lambda g, _: hostlist.compress([n["name"] for n in g.nodes]), header_cut=False),
    "o": _field("NODE_ADDR", lambda g, _: hostlist.compress([str(n.get("address") or n["name"]) for n in g.nodes]),
                header_cut=False),
    "p": _field("PRIO_TIER", lambda g, _: "1"),
    "P": _field("PARTITION", _partition_name),
    "r": _field("ROOT", lambda g, _: "no"),
    "R": _field("PARTITION", lambda g, _: str(g.partition["name"])),
    "s": _field("JOB_SIZE", lambda g, _: "1-infinite"),
    "t": _field("STATE", _state(compact=True)),
    "T": _field("STATE", _state(compact=False)),
    "u": _field("USER", lambda g, _: "Unknown"),
    "U": _field("USER", lambda g, _: "Unknown"),
    "w": _field("WEIGHT", lambda g, _: "1"),
    "z": _field("S:C:T", lambda g, _: f"{_same_or_plus([int(n.get('cpus', 0)) for n in g.nodes])}:1:1"),
}


def _count(group: Group, wanted: tuple[str, ...]) -> int:
    return sum(1 for n in group.nodes if n.get("state") in wanted)


def _nodes_aiot(group: Group) -> str:
    alloc = _count(group, ("allocated", "mixed", "draining"))
    idle = _count(group, ("idle",))
    return f"{alloc}/{idle}/{len(group.nodes) - alloc - idle}/{len(group.nodes)}"


def parse_format(spec: str) -> Format:
    return parse_percent_format(spec, LETTERS, lambda letter: f"Invalid node format specification: {letter}\n")


def shows_state(fmt: Format) -> bool:
    return any(c.field is LETTERS["t"] or c.field is LETTERS["T"] for c in fmt.columns)


def _features(node: Mapping) -> str | None:
    """A node's features as sinfo prints them (None: `(null)`)."""
    return ",".join(node.get("features") or ()) or None


def group_nodes(partitions: Sequence[Mapping], nodes: Sequence[Mapping], *, by_state: bool,
                node_centric: bool = False, by_features: bool = False) -> list[Group]:
    """One group per partition (and per node state when shown, and per feature set when %f is), in
    partition order; with `node_centric`, one group per node and partition, in node order."""
    by_name = {n["name"]: n for n in nodes}
    groups: list[Group] = []
    for partition in partitions:
        members = sorted((by_name[name] for name in partition.get("nodes", ()) if name in by_name),
                         key=lambda n: hostlist.sort_key(n["name"]))
        if node_centric:
            groups.extend(Group(partition, (n,)) for n in members)
            continue
        buckets: dict[str, list[Mapping]] = {}
        for node in members:
            state = states.node_state_compact(node) if by_state else ""
            buckets.setdefault(f"{state}\0{_features(node)}" if by_features else state, []).append(node)
        # sinfo's default sort "#P,-t": partitions in order, then states by Slurm's number, descending.
        ordered = sorted(buckets.values(), key=lambda b: -states.node_state_rank(b[0]) if by_state else 0)
        groups.extend(Group(partition, tuple(b)) for b in ordered)
    if node_centric:
        groups.sort(key=lambda g: hostlist.sort_key(g.nodes[0]["name"]))
    return groups


def group_reasons(nodes: Sequence[Mapping], *, by_state: bool) -> list[Group]:
    """sinfo -R: the nodes down, drained or draining, one group per reason (and per state when shown), in
    the order of their first node; each node once, whatever its partitions."""
    buckets: dict[tuple[str, str], list[Mapping]] = {}
    for node in sorted(nodes, key=lambda n: hostlist.sort_key(n["name"])):
        if node.get("state") in ("down", "drained", "draining"):
            key = (str(node.get("drain_reason") or ""), states.node_state_compact(node) if by_state else "")
            buckets.setdefault(key, []).append(node)
    return [Group({"name": ""}, tuple(b)) for b in buckets.values()]


def render(groups: Sequence[Group], fmt: Format, *, header: bool = True, widen: frozenset[str] = frozenset(),
           banner_now: float | None = None) -> str:
    """sinfo's stdout. `widen` names the columns ("PARTITION", "NODELIST") that sinfo sizes itself
    in its own default formats: at least MIN_FIELD_SIZE and enough for the longest value."""
    widths = {k: v for k, v in _widened(groups).items() if k in widen}

    def width_of(column: Column) -> int:
        return widths.get(column.field.header, column.width) if column.field else column.width

    lines = [timefmt.ctime(banner_now)] if banner_now is not None else []
    if header:
        lines.append(_header_line(fmt, width_of))
    lines.extend(_record_line(g, fmt, None, width_of) for g in groups)
    return "".join(line + "\n" for line in lines)


def _widened(groups: Sequence[Group]) -> dict[str, int]:
    part = max([MIN_FIELD_SIZE, *(len(_partition_name(g, None)) for g in groups)])
    node = max([MIN_FIELD_SIZE, *(len(LETTERS["N"].value(g, None)) for g in groups)])
    return {"PARTITION": part, "NODELIST": node}
