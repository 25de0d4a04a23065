"""Nodes joining and re-joining after a controller or agent restart: what their reports mean."""
from __future__ import annotations

import signal
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from corral.core.model import Gpu
from corral.engine.commands import Command, Kill, Launch
from corral.engine.outcome import kill_reason
from corral.engine.records import Job, JobState, Node
from corral.engine.steps import live_step_nodes


@dataclass(frozen=True, slots=True)
class Inventory:
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    address: str
    # How its agent confines tasks (protocol.Registration): as their user or as itself; its cgroups.
    run_as_user: bool = True
    agent_user: str = ""
    cgroups: str = ""
    features: frozenset[str] = frozenset()  # its agent's --feature list


@dataclass(slots=True)
class Reconciliation:
    """What a (re)joining agent's report means, decided against the engine's jobs: the jobs it must kill
    (the engine no longer has them), commands to send again (a launch never acknowledged, a kill of a
    job being stopped), jobs whose launch it acknowledges, and jobs whose started part it lost (the agent
    restarted: the engine stops their gangs and requeues them, or ends them NODE_FAIL)."""

    kill: list[int] = field(default_factory=list)
    resend: list[Command] = field(default_factory=list)
    acknowledged: list[Job] = field(default_factory=list)
    lost: list[Job] = field(default_factory=list)


def reconcile(name: str, jobs: Iterable[Job], running: AbstractSet[int], finished: AbstractSet[int],
              kill_grace_s: float) -> Reconciliation:
    out = Reconciliation()
    known: set[int] = set()
    for job in jobs:
        if name in live_step_nodes(job):
            known.add(job.id)  # its steps here end by themselves, or with the job
        run = job.runs.get(name)
        if run is None or run.finished:
            continue
        known.add(job.id)
        if job.id in running or job.id in finished:
            if job.state is JobState.COMPLETING and job.id in running:
                out.resend.append(Kill(job.id, name, signal.SIGTERM, kill_grace_s, reason=kill_reason(job)))
            if not run.started and job.id in running:
                out.acknowledged.append(job)
        elif not run.started and job.state is JobState.RUNNING:
            out.resend.append(Launch(job.id, name))
        else:
            out.lost.append(job)
    out.kill = sorted(j for j in running if j not in known)
    return out


def discount_stall(nodes: Iterable[Node], stall_s: float, now: float) -> None:
    """The controller itself could not listen for `stall_s` (a pause, swap, a blocked loop): no agent
    could reach it then, so that time is no node's silence. Each live node's last contact moves on by
    the stall, so a node is declared lost only after `node_timeout_s` of time the controller listened."""
    if stall_s <= 0:
        return
    for node in nodes:
        if node.up:
            node.last_seen = min(node.last_seen + stall_s, now)


def node_state(node: Node, allocated_gpus: int, allocated_cpus: int) -> str:
    """Slurm's node state names: down, drained/draining, allocated, mixed, idle."""
    busy = allocated_gpus > 0 or allocated_cpus > 0
    if not node.up:
        return "down"
    if node.drain:
        return "draining" if busy else "drained"
    if not busy:
        return "idle"
    full = allocated_gpus >= len(node.gpus) if node.gpus else allocated_cpus >= node.cpus
    return "allocated" if full else "mixed"
