"""The controller's side of its agents: registration, their events and the commands they poll for."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from corral.controller.agent_events import engine_event
from corral.controller.scheduling_loop import SchedulingLoop
from corral.controller.service_core import StaleAgent
from corral.controller.usage_views import GPU_IDLE, combine, gpu_idle_flagged
from corral.core.model import Gpu
from corral.engine import events as ev
from corral.engine.membership import Inventory
from corral.engine.records import JobState
from corral.engine.result import Result
from corral.protocol import (
    Command,
    EventBatch,
    NodeStarted,
    Registration,
    RegistrationReply,
    UsageReport,
)

log = logging.getLogger("corral.controller")


class AgentLink(SchedulingLoop):
    """Registering agents, folding in their events, handing them their commands."""

    async def register(self, reg: Registration) -> RegistrationReply:
        inventory = Inventory(
            gpus=tuple(Gpu(g.index, g.model, g.memory_mib, g.domain) for g in reg.gpus),
            cpus=reg.cpus, mem_mib=reg.mem_mib, address=reg.address, run_as_user=reg.run_as_user,
            agent_user=reg.agent_user, cgroups=reg.cgroups, features=frozenset(reg.features))

        def change(now: float) -> Result:
            self.outbox.ack(reg.node, 1 << 62)  # reconciliation below decides what still needs sending
            return self.engine.handle(ev.NodeRegistered(reg.node, inventory, frozenset(reg.running_jobs),
                                                        frozenset(reg.finished_jobs)), now=now)

        kill = (await self._stimulus(change)).reply
        log.info("node %s registered (%d GPUs)", reg.node, len(reg.gpus))
        return RegistrationReply(epoch=self.epoch, heartbeat_s=self.heartbeat_s, kill_jobs=kill,
                                 leader_epoch=self.leader_epoch, fence_after_s=self.fence_after_s)

    def check_agent(self, node: str, epoch: str | None) -> None:
        # A contact changes nothing stored (a restarted controller gives every node a full timeout).
        if epoch != self.epoch or not self.engine.handle(ev.NodeContacted(node), now=self.clock()).reply:
            raise StaleAgent(node)

    async def agent_events(self, node: str, epoch: str | None, batch: EventBatch) -> None:
        """Fold an agent's events in. Refused (StoreUnavailable, StaleAgent) means not taken: the agent
        keeps them and sends them again. Usage samples only go to `live_usage` (see LiveUsage)."""
        folded = [event for event in batch.events if not isinstance(event, UsageReport)]

        def change(now: float) -> Result:
            self.check_agent(node, epoch)  # under the lock: the engine may have been rebuilt meanwhile
            return self.engine.handle(*(engine_event(node, event) for event in folded), now=now)

        if folded:
            # A task that started changes nothing the scheduler looks at: no cycle for it (the simulator's
            # driver does not run one either, and a cycle would only find the same plan).
            await self._stimulus(change, wake=any(not isinstance(event, NodeStarted) for event in folded))
        else:
            self.check_agent(node, epoch)
        self.live_usage.take(node, batch.events, self.engine.jobs)
        reported = sorted({e.job_id for e in batch.events if isinstance(e, UsageReport) and e.step_id is None})
        usages = {job_id: combine(self.live_usage.of(job_id).get(None) or {}) for job_id in reported}
        self.job_series.record(self.clock(), usages.items())
        await self._cancel_idle(usages)

    async def _cancel_idle(self, usages: Mapping[int, dict[str, Any] | None]) -> None:
        """The gpu_idle_cancel_s policy: cancel a running job whose GPUs every node saw idle that long
        (`usages`: the combined usage of the jobs just reported, by id)."""
        limit_s = self.engine.config.gpu_idle_cancel_s
        for job_id, usage in usages.items():
            if usage is None or not gpu_idle_flagged(usage, limit_s):
                continue

            def change(now: float, job_id: int = job_id) -> Result:
                job = self.engine.jobs.get(job_id)  # under the lock: it may have ended meanwhile
                if job is None or job.state is not JobState.RUNNING:
                    return Result()
                return self.engine.handle(ev.CancelRequested(job_id, None, reason=GPU_IDLE), now=now)

            log.info("job %d: its GPUs idle for %.0fs (gpu_idle_cancel_s %g): cancelling it", job_id,
                     usage["gpu_idle_s"], limit_s)
            await self._stimulus(change)

    async def agent_commands(self, node: str, after: int, wait_s: float) -> list[Command]:
        outbox = self.outbox
        commands = await outbox.wait(node, after, wait_s)
        if outbox is not self.outbox or not self.lease_proven():
            # Decided by an engine that is gone (a failed commit, or this controller stopped leading).
            raise self.refusal() or StaleAgent(node)
        return commands
