"""Nodes joining, re-joining after a controller or agent restart, and being drained."""
from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from corral.core.model import Gpu
from corral.engine.commands import Command, Kill, Launch
from corral.engine.outcome import kill_reason
from corral.engine.records import JobState, Node, NodeRun
from corral.engine.steps import live_step_nodes

if TYPE_CHECKING:
    from corral.engine.engine import Engine


@dataclass(frozen=True, slots=True)
class Inventory:
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    address: str


def register(engine: Engine, name: str, inventory: Inventory, running: set[int], finished: set[int],
             now: float) -> tuple[list[int], list[Command]]:
    """A node agent (re)joins. Returns the jobs it must kill, and commands to re-send.

    What the agent runs is compared with what the engine believes runs there: a job the engine no longer
    has is killed; a launch the agent never acknowledged is re-sent; a job the agent had started but no
    longer knows (the agent restarted) is lost, and its gang ends as NODE_FAIL."""
    node = engine.nodes.get(name)
    if node is None:
        node = engine.nodes[name] = Node(name=name, gpus=inventory.gpus, cpus=inventory.cpus,
                                         mem_mib=inventory.mem_mib)
    node.gpus, node.cpus, node.mem_mib = inventory.gpus, inventory.cpus, inventory.mem_mib
    node.address, node.up, node.last_seen = inventory.address, True, now
    node.partitions = engine.config.partitions_of(name)
    engine.dirty_nodes.add(name)
    engine.usage.changed(name)
    engine.views.nodes_changed()
    commands: list[Command] = []
    known: set[int] = set()
    for job in list(engine.jobs.values()):
        if name in live_step_nodes(job):
            known.add(job.id)  # its steps here end by themselves, or with the job
        run = job.runs.get(name)
        if run is None or run.finished:
            continue
        known.add(job.id)
        if job.id in running or job.id in finished:
            if job.state is JobState.COMPLETING and job.id in running:
                commands.append(Kill(job.id, name, signal.SIGTERM, engine.config.kill_grace_s,
                                     reason=kill_reason(job)))
            if not run.started and job.id in running:
                run.started = True
                engine._touch(job)
        elif not run.started and job.state is JobState.RUNNING:
            commands.append(Launch(job.id, name))
        else:
            job.runs[name] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            commands.extend(engine._fail_gang(job, now))
    kill = sorted(j for j in running if j not in known)
    return kill, commands


def contact(engine: Engine, name: str, now: float) -> bool:
    """The agent was heard from. False if the node is unknown or marked down (it must register)."""
    node = engine.nodes.get(name)
    if node is None or not node.up:
        return False
    node.last_seen = now
    return True


def discount_stall(engine: Engine, stall_s: float, now: float) -> None:
    """The controller itself could not listen for `stall_s` (a pause, swap, a blocked loop): no agent
    could reach it then, so that time is no node's silence. Each live node's last contact moves on by
    the stall, so a node is declared lost only after `node_timeout_s` of time the controller listened."""
    if stall_s <= 0:
        return
    for node in engine.nodes.values():
        if node.up:
            node.last_seen = min(node.last_seen + stall_s, now)


def set_drain(engine: Engine, name: str, drain: bool, reason: str) -> Node:
    node = engine.nodes[name]
    node.drain, node.drain_reason = drain, (reason if drain else "")
    engine.dirty_nodes.add(name)
    engine.usage.changed(name)
    return node


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
