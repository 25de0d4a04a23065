"""The controller service: the users' requests and queries (submit, cancel, requeue, jobs, nodes) over the
layers below it: the agents' side (agent_link.py), the scheduling loop and lifecycle (scheduling_loop.py),
and the core that folds each stimulus into the engine and commits it before anyone is answered
(service_core.py, whose docstring states the state-store contract).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from corral.api.schemas import JobOut, JobSubmit, NodeOut, PartitionOut
from corral.controller import views
from corral.controller.agent_link import AgentLink
from corral.controller.leadership import NotLeader
from corral.controller.service_core import StaleAgent, meta_value
from corral.controller.writer import StoreUnavailable
from corral.engine import events as ev
from corral.engine.job_refs import UnknownRef, named_job_ids
from corral.engine.records import Job
from corral.engine.result import Result
from corral.engine.snapshot import node_usage
from corral.jobref import JobRef

__all__ = ["ControllerService", "StaleAgent", "meta_value"]


class ControllerService(AgentLink):
    """The controller: the users' requests and queries, over its agents' side, loop and core."""

    async def submit(self, sub: JobSubmit) -> tuple[int, list[int]]:
        # Durable before the user hears the id. Under a burst of submissions, a cycle after each would
        # only find the new jobs too fresh to start (start_delay_s): the loop's timer is set to when
        # they may, and that cycle starts all that came meanwhile at once.
        result = await self._stimulus(functools.partial(self._submit, sub), wake=False)
        engine = self._engine
        if engine is None or engine.cycle_wanted_for_submitted(result.jobs):
            self.poke()
        else:
            self.rearm()
        return result.reply

    def _submit(self, sub: JobSubmit, now: float) -> Result:
        return self.engine.handle(ev.SubmissionRequested(sub), now=now)

    async def cancel(self, job_id: int, uid: int | None = None) -> JobOut:
        return await self._job_operation(job_id, ev.CancelRequested(job_id, uid))

    async def signal(self, job_id: int, signum: int, scope: str, uid: int | None) -> JobOut:
        return await self._job_operation(job_id, ev.SignalRequested(job_id, signum, scope, uid))

    async def requeue(self, job_id: int) -> tuple[JobOut, Callable[[], None]]:
        """Requeue, and a function that sends the kills: the caller runs it once the reply is out, since
        `scontrol requeue` is usually run by the job itself (submitit, Lightning), whose processes the
        kill would otherwise reach before scontrol has heard that its request succeeded."""
        result = await self._stimulus(lambda now: self.engine.handle(ev.RequeueRequested(job_id), now=now),
                                      wake=False, dispatch=False)
        out = self.job_after_request(job_id)

        def send() -> None:
            self._dispatch(result.commands)
            self.poke()

        return out, send

    async def request(self, event: ev.Event):
        """Hand the engine one request (committed, then its commands dispatched); its reply."""
        return (await self._handle(event)).reply

    async def update(self, job_id: int, changes) -> JobOut:
        return await self._job_operation(job_id, ev.UpdateRequested(job_id, **changes.model_dump(exclude_none=True)))

    async def hold(self, job_id: int, held: bool) -> JobOut:
        return await self._job_operation(job_id, ev.HoldRequested(job_id, held))

    async def _job_operation(self, job_id: int, event: ev.Event) -> JobOut:
        await self._handle(event)
        return self.job_after_request(job_id)

    def job_after_request(self, job_id: int) -> JobOut:
        """The job a request the engine took was about, read after the commit: a job that ended (a pending
        one cancelled) is back from the store."""
        job = self.find_job(job_id)
        assert job is not None, "the engine refuses a request about an unknown job (UnknownJob)"
        return views.job_out(job, self.clock(), gpu_idle_flag_s=self.engine.config.gpu_idle_flag_s)

    def find_job(self, job_id: int) -> Job | None:
        return self.engine.jobs.get(job_id) or self.store.get_job(job_id)

    def job(self, job_id: int) -> JobOut | None:
        job = self.find_job(job_id)
        if job is None:
            return None
        out = views.job_out(job, self.clock(), None if job.state.terminal else self.live_usage.of(job_id),
                            self.forecasts.starts.get(job_id), gpu_idle_flag_s=self.engine.config.gpu_idle_flag_s,
                            window=self.forecasts.window)
        view = self.engine.views.pending.get(job_id)
        if view is not None:
            out.position = 1 + sum(1 for other in self.engine.views.pending.values() if other.order < view.order)
            out.priority = view.priority
        return out

    def job_ids(self, refs: Iterable[JobRef]) -> list[int]:
        """The raw ids the references name (corral.engine.job_refs); those naming no job add none."""
        found: set[int] = set()
        for ref in refs:
            try:
                found.update(named_job_ids(ref, self.find_job))
            except UnknownRef:
                continue
        return sorted(found)

    def nodes(self) -> list[NodeOut]:
        usage = node_usage(self.engine.active, self.engine.nodes)
        owners: dict[str, dict[int, int]] = {}
        for job in self.engine.jobs.values():
            for s in job.slices:
                owners.setdefault(s.node, {}).update({g: job.id for g in s.gpus})
        return [views.node_out(n, usage.get(n.name, (set(), 0, 0)), owners.get(n.name, {}))
                for n in sorted(self.engine.nodes.values(), key=lambda n: n.name)]

    def partitions(self) -> list[PartitionOut]:
        return views.partition_outs(self.engine.config, list(self.engine.nodes.values()))

    async def accrue_usage(self) -> None:
        """Charge running jobs' fair-share usage up to now, and store it. While the store cannot be
        written, reads show what is committed (as every read does then): nothing is charged."""
        if self.writer.outage is None:
            try:
                await self._handle(ev.UsageAccrualDue(), wake=False)
            except (StoreUnavailable, NotLeader):
                pass

    async def set_tenancy(self, spec) -> None:
        await self._handle(ev.TenancyChanged(spec))

    async def add_reservation(self, spec):
        return await self.request(ev.ReservationAdded(spec))

    async def remove_reservation(self, name: str) -> None:
        await self._handle(ev.ReservationRemoved(name))

    async def drain(self, node: str, drain: bool, reason: str) -> None:
        await self._handle(ev.DrainRequested(node, drain, reason))
