"""The agent's registration with the controller: its epochs, and the jobs it must kill first (see agent.py)."""
from __future__ import annotations

import asyncio
import functools
import logging
import math
import signal
from importlib import metadata

import httpx
from pydantic import ValidationError

from corral.agent.agent_state import Backoff
from corral.agent.contact import now as contact_clock
from corral.agent.identity import agent_user
from corral.agent.launches import Launches
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.protocol import (
    API_PREFIX,
    Registration,
    RegistrationReply,
)

log = logging.getLogger(__name__)

# Jobs the controller wants gone when it answers a registration are SIGKILLed; how long the agent waits for
# their tasks to go before it takes commands (and writes the contact that thaws what is left).
KILL_ON_REGISTER_WAIT_S = 10.0


class Registrant(Launches):
    """Registering (again, after a 409) with the leading controller."""

    async def _register(self, backoff: Backoff) -> None:
        """Register, retrying until the controller accepts."""
        assert self._client is not None
        self._contact.registering()
        while True:
            registration = self._registration()
            asked, sent_at = self._controller_url, contact_clock()
            try:
                response = await self._client.post(
                    f"{API_PREFIX}/agents/register",
                    content=registration.model_dump_json(),
                    headers={"Content-Type": "application/json"},
                )
                if self._misdirected(response, asked):
                    reason = f"{asked} is not the leader"
                elif response.is_success:
                    reply = RegistrationReply.model_validate_json(response.content)
                    stale = self._stale_leader(reply.leader_epoch)
                    if stale is None:
                        backoff.succeeded()
                        await self._accept_registration(reply, registration)
                        # Only now: a fresh contact thaws the frozen tasks, and the disowned are dead.
                        self._contact.registered(reply.fence_after_s, sent_at)
                        return
                    reason = stale
                else:
                    reason = f"HTTP {response.status_code}: {response.text[:200]}"
            except (httpx.RequestError, ValidationError) as exc:
                self._unreachable(exc, asked)
                reason = self._describe_error(exc)
            await backoff.failed(reason)

    def _stale_leader(self, leader_epoch: int) -> str | None:
        """Why a reply at `leader_epoch` must be refused (an older leader's), or None after noting it."""
        if leader_epoch < self._leader_epoch:
            return (f"the controller answered at leader epoch {leader_epoch}, older than {self._leader_epoch}: "
                    "it no longer leads")
        self._leader_epoch = leader_epoch
        return None

    def _registration(self) -> Registration:
        inventory = self._inventory
        return Registration(
            node=self.node,
            address=self._address,
            gpus=inventory.gpus,
            cpus=inventory.cpus,
            mem_mib=inventory.mem_mib,
            running_jobs=self.running_jobs,
            finished_jobs=self.unacknowledged_finished_jobs,
            running_steps=self.running_steps,
            agent_version=_agent_version(),
            run_as_user=self._confinement.run_as_user,
            agent_user=agent_user(),
            cgroups=self._cgroups_status,
            features=self._features,
        )

    async def _accept_registration(self, reply: RegistrationReply, sent: Registration) -> None:
        if reply.epoch != self._epoch:
            # A new controller numbers its commands afresh.
            self._after_seq = 0
        self._epoch = reply.epoch
        # Polling at least once per heartbeat is what keeps this node alive in the controller's eyes; and
        # every fence_after_s / 4, so that a healthy agent's contact is never older than about half of it.
        fencing = math.inf if reply.fence_after_s is None else reply.fence_after_s / 4
        self._poll_wait_s = max(0.1, min(self._max_poll_wait_s, reply.heartbeat_s, fencing))
        log.info("registered %s with epoch %s (%d running, %d finished unacknowledged)",
                 self.node, reply.epoch, len(sent.running_jobs), len(sent.finished_jobs))
        self._outbox_ready.set()  # re-send whatever the previous controller did not acknowledge
        runners: list[JobRunner | StepRunner] = [*self._runners.values(), *self._steps.values()]
        disowned = [r for r in runners if r.job_id in reply.kill_jobs]
        for job_id in reply.kill_jobs:
            # SIGKILL, no grace: the controller gave the job away, and its run here may be frozen (decision
            # 0017); a SIGTERM would wait for the thaw, and a handler saving work would write beside the new run.
            self._start_kill(job_id, signal.SIGKILL, 0.0)
        if disowned:  # no command is taken before their GPUs are free
            exits = [asyncio.ensure_future(r.exited()) for r in disowned]
            _, late = await asyncio.wait(exits, timeout=KILL_ON_REGISTER_WAIT_S)
            for waiter in late:
                waiter.cancel()

    async def _reregister(self, stale_epoch: str | None) -> None:
        """Register again after a 409, once, however many loops noticed it."""
        async with self._register_lock:
            if self._epoch != stale_epoch:
                return  # another loop already registered with the new controller
            log.info("controller answered 409 (it restarted): registering again")
            await self._register(Backoff("re-registration"))



@functools.cache
def _agent_version() -> str:
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:
        return ""
