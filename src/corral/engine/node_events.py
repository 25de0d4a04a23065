"""Nodes joining, being heard from, drained and lost: the engine's node records and what each change means
for the jobs on them. Each handler returns (its reply, the commands it calls for)."""
from __future__ import annotations

import signal

from corral.engine import events as ev
from corral.engine import membership, steps
from corral.engine.active import ActiveSet
from corral.engine.admission import PartitionMembers
from corral.engine.commands import Command
from corral.engine.config import EngineConfig
from corral.engine.lifecycle import Lifecycle
from corral.engine.node_choice import discovered_features
from corral.engine.records import JobState, Node, NodeRun


class NodeEvents:
    def __init__(self, config: EngineConfig, nodes: dict[str, Node], active: ActiveSet, life: Lifecycle) -> None:
        self.config = config
        self.nodes = nodes
        self.active = active
        self.life = life
        self.dirty: set[str] = set()  # node records changed since the last Result
        self._members: PartitionMembers | None = None  # made anew whenever a node registers

    def partition_members(self) -> PartitionMembers:
        """Each partition's nodes, as admission reads them."""
        if self._members is None:
            self._members = PartitionMembers(self.nodes.values())
        return self._members

    def registered(self, event: ev.NodeRegistered, now: float) -> tuple[list[int], list[Command]]:
        """A node agent (re)joins: its record is updated, and what it runs is reconciled with the jobs."""
        name, inventory = event.node, event.inventory
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = Node(name=name, gpus=inventory.gpus, cpus=inventory.cpus,
                                           mem_mib=inventory.mem_mib)
        node.gpus, node.cpus, node.mem_mib = inventory.gpus, inventory.cpus, inventory.mem_mib
        node.address, node.up, node.last_seen = inventory.address, True, now
        node.run_as_user, node.agent_user, node.cgroups = inventory.run_as_user, inventory.agent_user, inventory.cgroups
        node.features = inventory.features | discovered_features(inventory.gpus[0].model if inventory.gpus else "")
        node.partitions = self.config.partitions_of(name)
        self._members = None
        self.dirty.add(name)
        self.active.node_changed(name)
        self.active.views.nodes_changed(self.active.jobs)
        found = membership.reconcile(name, list(self.active.jobs.values()), event.running, event.finished,
                                     self.config.kill_grace_s)
        for job in found.acknowledged:
            job.runs[name].started = True
            self.life.touch(job)
        commands = list(found.resend)
        for job in found.lost:
            run = job.runs[name]
            job.runs[name] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            commands.extend(self.life.fail_gang(job, name, now))
        return found.kill, commands

    def contacted(self, event: ev.NodeContacted, now: float) -> tuple[bool, list[Command]]:
        node = self.nodes.get(event.node)
        if node is None or not node.up:
            return False, []
        node.last_seen = now  # kept in memory only: a restarted controller gives every node a full timeout
        return True, []

    def listener_stalled(self, event: ev.ListenerStalled, now: float) -> tuple[None, list[Command]]:
        membership.discount_stall(self.nodes.values(), event.stall_s, now)
        return None, []

    def drain_requested(self, event: ev.DrainRequested, now: float) -> tuple[Node, list[Command]]:
        node = self.nodes.get(event.node)
        if node is None:
            raise KeyError(event.node)
        node.drain, node.drain_reason = event.drain, (event.reason if event.drain else "")
        self.dirty.add(node.name)
        self.active.node_changed(node.name)
        return node, []

    def unhealthy(self, event: ev.NodeUnhealthy, now: float) -> tuple[None, list[Command]]:
        """Drain the node with the agent's reason (kept until an operator resumes it, as Slurm's
        HealthCheckProgram drains) and stop the gangs running there: the agent is alive, so every node
        of each gang, this one included, is told to kill its part; the job is then requeued or ends
        NODE_FAIL (Lifecycle.fail_gang). A report about a node not known, or not up, changes nothing."""
        node = self.nodes.get(event.node)
        if node is None or not node.up:
            return None, []
        self.drain_for(node.name, event.reason)
        commands: list[Command] = []
        for job in list(self.active.jobs.values()):
            if job.state is JobState.RUNNING and event.node in job.node_names:
                commands.extend(self.life.fail_gang(job, event.node, now))
        return None, commands

    def drain_for(self, name: str, reason: str) -> None:
        """Drain the node for a failure its agent found (kept until an operator resumes it)."""
        node = self.nodes.get(name)
        if node is not None and (node.drain, node.drain_reason) != (True, reason):
            node.drain, node.drain_reason = True, reason
            self.dirty.add(node.name)
            self.active.node_changed(node.name)

    def lost(self, name: str, now: float) -> list[Command]:
        node = self.nodes[name]
        node.up = False
        self.dirty.add(name)
        self.active.node_changed(name)
        life = self.life
        commands: list[Command] = []
        for job in list(self.active.jobs.values()):
            if job.state not in (JobState.RUNNING, JobState.COMPLETING) or name not in job.node_names:
                continue
            steps.node_lost(job, name, now)
            run = job.runs.get(name)
            if run is not None and not run.finished:
                job.runs[name] = NodeRun(started=run.started, finished=True, signal=signal.SIGKILL)
            if job.state is JobState.RUNNING or run is not None and not run.finished:
                commands.extend(life.fail_gang(job, name, now))
            else:
                commands.extend(life.maybe_end(job, now))
        return commands

