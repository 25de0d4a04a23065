"""The node agent: registers with the controller, long-polls for commands, runs jobs, reports events.

Resilience rules (the controller may restart or vanish for minutes at any time):
- Every request is retried forever with a capped backoff (0.2 s doubling to 2 s); jobs keep running.
- Events wait in an outbox until the controller answers 2xx; they are idempotent on its side, so sending
  one twice is harmless and losing one is not.
- Any 409 means the controller restarted (new epoch): register again, reporting the jobs running here and
  the finished jobs whose NodeFinished is still unacknowledged, then carry on with the outbox.
- Commands may be re-sent: a launch for a job already running or finished here is ignored.
- Every registration reply and command batch carries the leader's lease epoch; the agent remembers the
  highest it has seen and neither registers with nor takes commands from a controller at a lower one (an
  old leader that was paused or cut off and has not noticed that another took over).
- Job steps (srun) run beside the job's own tasks, in runners of their own (step_runner.py); a signal
  for a job reaches its steps too unless it names only the batch part.
- Tasks outlive the agent (each has a leader of its own, which records its exit: task_leader.c). Before
  it registers, a restarted agent adopts from its spool the jobs and steps whose tasks still run or whose
  ends were recorded (adoption.py), reports them as running, and kills whatever else its spool or its
  cgroups hold (decision 0015).
- Jobs the controller disowns when it answers a registration (it failed them while this agent was away)
  are SIGKILLed, and their tasks gone, before the agent takes any command or writes the contact that thaws
  the node's frozen tasks (decision 0017): their GPUs are free before any new launch onto them, and a run
  the controller gave away never runs again here.
- A launch onto GPUs that a live task of another job still holds is refused (the launch fails, with
  the reason): no device is ever given to two live jobs, whatever the controller believes.
- Several controllers: the agent talks to their leader. A standby's 421 moves it to the leader the standby
  names (X-Corral-Leader), else to the next controller; so does a refused connection. Every request the
  agent makes may be repeated (events are idempotent, polls and registrations are safe), so it retries each
  with the new controller, whose other epoch makes it register there first (the 409 rule above).
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import sys

import httpx
from pydantic import ValidationError

from corral.agent.agent_state import MAX_EVENTS_PER_BATCH, REQUEST_TIMEOUT_S, Backoff
from corral.agent.auth_socket import serve_auth_socket
from corral.agent.contact import now as contact_clock
from corral.agent.registration import Registrant
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.protocol import (
    API_PREFIX,
    EPOCH_HEADER,
    CommandBatch,
    Event,
    EventBatch,
    UsageReport,
)
from corral.unix_auth_socket import close as close_auth_socket

log = logging.getLogger(__name__)

# httpcore asks sniffio which event loop it runs under several times per request, importing it each time;
# where sniffio is not installed (httpx no longer needs it) each failed import searches all of sys.path
# again (about 80 us a time, some 0.2 ms of the agent's CPU per job). A None entry fails it at once, and
# httpcore then takes asyncio, as it did.
if importlib.util.find_spec("sniffio") is None:
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

# How often the usage loop looks for jobs due a sample (each has its interval, at least this).
MIN_USAGE_TICK_S = 1.0
# How long task starts alone wait in the outbox for more events to go with them (see _send_loop).
START_LINGER_S = 0.05
# Statuses that mean "this event batch will never be accepted": dropping it beats wedging the outbox.
REJECTED_STATUSES = (400, 422)


class Agent(Registrant):
    """One node's agent. The constructor does no I/O; `await run()` works until cancelled.

    Cancelling `run()` stops talking to the controller and leaves running tasks alone, as a slurmd
    restart does.
    """

    async def run(self) -> None:
        headers = {"Authorization": f"Bearer {self._secret}"}
        async with httpx.AsyncClient(
            base_url=self._controller_url, headers=headers, timeout=REQUEST_TIMEOUT_S, verify=self._tls_context()
        ) as client:
            self._client = client
            socket_path = self._auth_socket
            users = await serve_auth_socket(socket_path, self.node, lambda: self._client) if socket_path else None
            try:
                await self.adopt_recorded_tasks()
                await self._register(Backoff("registration"))
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._poll_loop())
                    group.create_task(self._send_loop())
                    if self._health is not None:
                        group.create_task(self._health.run())
                    group.create_task(self._usage_loop())
            finally:
                for task in list(self._background):
                    task.cancel()  # stops watching jobs; the jobs themselves keep running
                if users is not None and socket_path:
                    close_auth_socket(users, socket_path)
                self._client = None


    # -- commands

    async def _poll_loop(self) -> None:
        assert self._client is not None
        backoff = Backoff("command poll")
        while True:
            epoch, wait_s, asked = self._epoch, self._poll_wait_s, self._controller_url
            sent_at = contact_clock()
            try:
                response = await self._client.get(
                    f"{API_PREFIX}/agents/{self.node}/commands",
                    params={"after": self._after_seq, "wait_s": wait_s},
                    headers={EPOCH_HEADER: epoch or ""},
                    timeout=wait_s + REQUEST_TIMEOUT_S,
                )
                if self._misdirected(response, asked):
                    await backoff.failed(f"{asked} is not the leader")
                    continue
                if response.status_code == 409:
                    await self._reregister(epoch)
                    continue
                if not response.is_success:
                    await backoff.failed(f"HTTP {response.status_code}")
                    continue
                batch = CommandBatch.model_validate_json(response.content)
            except (httpx.RequestError, ValidationError) as exc:
                self._unreachable(exc, asked)
                await backoff.failed(self._describe_error(exc))
                continue
            stale = self._stale_leader(batch.leader_epoch)
            if stale is not None:
                log.warning("refused %d command(s): %s", len(batch.commands), stale)
                await backoff.failed(stale)
                continue
            backoff.succeeded()
            self._contact.made(sent_at)
            for command in batch.commands:
                self._handle(command)


    # -- usage

    async def _usage_loop(self) -> None:
        """Sample every running job and step as its interval says (usage.py); post their latest usage,
        at most one round waiting in the outbox at a time (a controller away for long finds one round)."""
        monitor = self._usage
        started = await asyncio.to_thread(monitor.start)
        try:
            while True:
                await asyncio.sleep(MIN_USAGE_TICK_S)
                try:
                    await self._sample_usage()
                except Exception:  # a bug here must not take the agent, and its jobs' reports, down
                    log.exception("sampling the jobs' usage failed; trying again next round")
        finally:
            if started:
                monitor.stop()

    async def _sample_usage(self) -> None:
        runners: list[JobRunner | StepRunner] = [*self._runners.values(), *self._steps.values()]
        targets = [(r.tracked(), r.launch.acctg_freq_s) for r in runners if r.pids]
        reports = await asyncio.to_thread(self._usage.sample_due, targets, asyncio.get_running_loop().time())
        if reports and not any(isinstance(e, UsageReport) for e in self._outbox):
            for tracked, usage in reports:
                self._post(UsageReport(job_id=tracked.job_id, step_id=tracked.step_id, usage=usage))


    # -- events

    async def _send_loop(self) -> None:
        backoff = Backoff("event delivery")
        while True:
            await self._outbox_ready.wait()
            if not self._outbox:
                self._outbox_ready.clear()
                self._outbox_urgent.clear()
                self._batch_events = MAX_EVENTS_PER_BATCH  # what was too large has gone
                continue
            if not self._outbox_urgent.is_set():
                # Only task starts so far: a short task's end, and the other starts of the same command
                # batch, come within moments and go in the same request.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._outbox_urgent.wait(), START_LINGER_S)
            batch = self._outbox[:self._batch_events]
            delivered = await self._send(batch, backoff)
            if delivered:
                runners = [r for r in (self._releases.pop(id(event), None) for event in batch) if r is not None]
                if runners:  # one hand-off to a thread per batch, not per job
                    await asyncio.to_thread(_release_all, runners)
                del self._outbox[: len(batch)]  # only this loop removes, and always from the front

    async def _send(self, batch: list[Event], backoff: Backoff) -> bool:
        """POST one batch; True when it is done with (accepted, or rejected as malformed)."""
        assert self._client is not None
        epoch, asked, sent_at = self._epoch, self._controller_url, contact_clock()
        try:
            response = await self._client.post(
                f"{API_PREFIX}/agents/{self.node}/events",
                content=EventBatch(events=batch).model_dump_json(),
                headers={"Content-Type": "application/json", EPOCH_HEADER: epoch or ""},
            )
        except httpx.RequestError as exc:
            self._unreachable(exc, asked)
            await backoff.failed(self._describe_error(exc))
            return False
        if self._misdirected(response, asked):
            await backoff.failed(f"{asked} is not the leader")
            return False
        if response.status_code == 409:
            await self._reregister(epoch)
            return False
        if response.status_code == 413 and len(batch) > 1:
            # Over the controller's [http] max_agent_body_mib: the same events go again, in halves.
            self._batch_events = len(batch) // 2
            log.warning("controller refused %d event(s) as too large; sending %d at a time",
                        len(batch), self._batch_events)
            return False
        if response.status_code in (*REJECTED_STATUSES, 413):  # 413: one event alone is over the cap
            log.error("controller rejected %d event(s), dropping them: HTTP %d %s",
                      len(batch), response.status_code, response.text[:200])
            return True
        if not response.is_success:
            await backoff.failed(f"HTTP {response.status_code}")
            return False
        backoff.succeeded()
        self._contact.made(sent_at)
        return True


def _release_all(runners: list[JobRunner | StepRunner]) -> None:
    """Forget the spool's records of runners whose ends the controller has (blocking: file removals)."""
    for runner in runners:
        runner.release()
