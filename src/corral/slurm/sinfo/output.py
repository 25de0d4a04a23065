"""sinfo as a pure function: parsed options, partitions and nodes in, stdout out."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral import hostlist
from corral.slurm.sinfo import format as fmt
from corral.slurm.sinfo.opts import SinfoOptions


def select_nodes(options: SinfoOptions, nodes: Sequence[Mapping]) -> list[Mapping]:
    wanted = set(hostlist.expand(options.nodes)) if options.nodes else None

    def keep(node: Mapping) -> bool:
        state = node.get("state")
        return all((
            wanted is None or node["name"] in wanted,
            options.states is None or state in options.states,
            not options.dead_only or state == "down",
            not options.responding_only or state != "down",
        ))
    return [n for n in nodes if keep(n)]


def sinfo_output(options: SinfoOptions, partitions: Sequence[Mapping], nodes: Sequence[Mapping],
                 now: float) -> tuple[str, str, int]:
    """(stdout, stderr, exit status)."""
    shown = [p for p in partitions if options.partitions is None or p["name"] in options.partitions]
    if options.list_reasons:
        members = {name for p in shown for name in p.get("nodes", ())}
        groups = fmt.group_reasons([n for n in select_nodes(options, nodes) if n["name"] in members],
                                   by_state=options.by_state)
    else:
        by_features = any(c.field is fmt.LETTERS["f"] for c in options.format.columns)
        groups = fmt.group_nodes(shown, select_nodes(options, nodes), by_state=options.by_state,
                                 node_centric=options.node_centric, by_features=by_features)
    out = fmt.render(groups, options.format, header=not options.noheader, widen=options.widen,
                     banner_now=now if options.long_banner else None)
    return out, "".join(options.warnings), 0
