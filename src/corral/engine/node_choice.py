"""Which nodes a job chose: sbatch's -w/--nodelist, -x/--exclude and --constraint (node features), checked
at admission with Slurm's texts and resolved into the node set the core confines the job to
(PendingJob.nodes). Pure: the nodes are inputs.

--constraint takes Slurm's `a`, `a&b` (every feature) and `a|b` (any of them). Slurm's other forms (mixing
& and | without brackets, `[a|b]` matching OR, counts `a*2`, parentheses, `!a`) are refused with a clear
message rather than read in some other way.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from corral import gpu_models, hostlist
from corral.container_options import RUNTIME_FEATURE
from corral.engine.records import Node

_FEATURE = re.compile(r"^[A-Za-z0-9_.:+-]{1,64}$")


class NodeChoiceError(ValueError):
    """The job's node choice can never be met; the message is Slurm's text where Slurm has one."""


@dataclass(frozen=True, slots=True)
class Constraint:
    """Features the job's nodes need: all of them (`every`), or at least one of them."""

    features: frozenset[str]
    every: bool

    def met_by(self, features: frozenset[str]) -> bool:
        if self.every:
            return self.features <= features
        return not self.features.isdisjoint(features)


def parse_constraint(text: str) -> Constraint:
    """Slurm's --constraint, in the forms corral reads fully: `a`, `a&b&c`, `a|b|c`."""
    for token, what in (("[", "matching OR ([a|b])"), ("(", "parentheses"), ("*", "feature counts (a*2)"),
                        ("!", "negation (!a)"), (",", "a comma")):
        if token in text:
            raise NodeChoiceError(f"Invalid feature specification: {text!r}: {what} is not supported by corral; "
                                  f"use a, a&b or a|b")
    if "&" in text and "|" in text:
        raise NodeChoiceError(f"Invalid feature specification: {text!r}: corral reads a&b or a|b, not both in "
                              f"one constraint")
    every = "|" not in text
    parts = text.split("&" if every else "|")
    for part in parts:
        if not _FEATURE.match(part):
            raise NodeChoiceError(f"Invalid feature specification: {text!r}")
    return Constraint(frozenset(parts), every)


def discovered_features(gpus_model: str) -> frozenset[str]:
    """Features a node has without declaring them: its GPU model's Slurm type (`a100`), as sites name them."""
    short = gpu_models.gpu_type(gpus_model) if gpus_model else ""
    return frozenset({short}) if short else frozenset()


def needed_features(container_image: str) -> frozenset[str]:
    """Features a job needs whatever it chose: a container runtime for a job with --container-image."""
    return frozenset({RUNTIME_FEATURE}) if container_image else frozenset()


def check_choice(nodelist: str, exclude: str, constraint: str, num_nodes: int | None, members: Iterable[Node],
                 known: Iterable[str], needs: frozenset[str] = frozenset()) -> tuple[int | None, frozenset[str]]:
    """Check a submission's choice against the partition's nodes (`members`) and every node the cluster
    knows (`known`): the node count the job takes (-N, or the -w list's length) and the nodes it may use.
    `needs`: features every node of the job must have besides its --constraint (needed_features)."""
    members = list(members)
    names = frozenset(n.name for n in members)
    known = frozenset(known)
    wanted = _names(nodelist, "--nodelist")
    avoided = _names(exclude, "--exclude")
    for name in sorted(wanted | avoided):
        if name not in known:
            raise NodeChoiceError(f"Invalid node name specified: {name}")
    if wanted:
        if num_nodes is not None and len(wanted) > num_nodes:
            raise NodeChoiceError(f"Required nodelist includes more nodes than permitted by max-node count "
                                  f"({len(wanted)} > {num_nodes})")
        if num_nodes is not None and num_nodes > len(wanted):
            raise NodeChoiceError(f"-N {num_nodes} with a --nodelist of {len(wanted)} node(s): corral places a job "
                                  f"with --nodelist on exactly the listed nodes; list all {num_nodes}")
        outside = sorted(wanted - names)
        if outside:
            raise NodeChoiceError(f"Requested node configuration is not available: {', '.join(outside)} not in "
                                  f"the job's partition")
        if wanted & avoided:
            raise NodeChoiceError(f"Requested node configuration is not available: "
                                  f"{', '.join(sorted(wanted & avoided))} both in --nodelist and --exclude")
        num_nodes = len(wanted)
    if constraint:
        parsed = parse_constraint(constraint)
        offered = frozenset().union(*(n.features for n in members)) if members else frozenset()
        unknown = sorted(parsed.features - offered)
        if parsed.every and unknown or not parsed.every and len(unknown) == len(parsed.features):
            raise NodeChoiceError(f"Invalid feature specification: no node of the partition has "
                                  f"{', '.join(unknown)} (features: {', '.join(sorted(offered)) or 'none'})")
    _check_needs(needs, members, num_nodes)
    allowed = allowed_nodes(nodelist, exclude, constraint, members, needs)
    assert allowed is not None  # some choice was made, or check_choice is not called
    if len(allowed) < (num_nodes or 1):
        also = " and can run containers" if needs else ""
        raise NodeChoiceError(f"Requested node configuration is not available: {len(allowed)} node(s) of the "
                              f"partition meet the job's --nodelist, --exclude and --constraint{also}, it needs "
                              f"{num_nodes or 1}")
    return num_nodes, allowed


def _check_needs(needs: frozenset[str], members: list[Node], num_nodes: int | None) -> None:
    if RUNTIME_FEATURE not in needs:
        return
    able = [n.name for n in members if RUNTIME_FEATURE in n.features]
    if len(able) < (num_nodes or 1):
        raise NodeChoiceError(f"Requested node configuration is not available: --container-image needs nodes "
                              f"that can run containers (feature {RUNTIME_FEATURE}: runc and uidmap installed, "
                              f"shown by corral nodes); {len(able)} of the partition's {len(members)} node(s) "
                              f"can, the job needs {num_nodes or 1}")


def allowed_nodes(nodelist: str, exclude: str, constraint: str, members: Iterable[Node],
                  needs: frozenset[str] = frozenset()) -> frozenset[str] | None:
    """The nodes of `members` the choice allows (None: no choice, any node)."""
    if not (nodelist or exclude or constraint or needs):
        return None
    wanted = _names(nodelist, "--nodelist")
    avoided = _names(exclude, "--exclude")
    parsed = parse_constraint(constraint) if constraint else None
    return frozenset(n.name for n in members
                     if (not wanted or n.name in wanted) and n.name not in avoided
                     and (parsed is None or parsed.met_by(n.features)) and needs <= n.features)


def _names(expression: str, option: str) -> frozenset[str]:
    if not expression:
        return frozenset()
    try:
        return frozenset(hostlist.expand(expression))
    except hostlist.HostlistError as exc:
        raise NodeChoiceError(f"invalid {option} {expression!r}: {exc}") from None
