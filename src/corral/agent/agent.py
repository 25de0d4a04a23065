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
- Tasks outlive the agent (each has a leader of its own, which records its exit: task_leader.py). Before
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
import functools
import logging
import math
import signal
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from corral.agent.adoption import Adoptable, find_adoptable
from corral.agent.auth_socket import serve_auth_socket
from corral.agent.cgroups import JobCgroup
from corral.agent.contact import Contact
from corral.agent.contact import now as contact_clock
from corral.agent.discovery import Inventory
from corral.agent.health import HealthConfig, HealthMonitor
from corral.agent.identity import agent_user
from corral.agent.leaders import forget_exits
from corral.agent.mps import MpsDaemon, MpsError
from corral.agent.replicas import Replicas
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.agent.task_spool import SWEEP_GRACE_S, TaskRecord, TaskSpool, live_members, sweep
from corral.agent.tasks import DEVELOPMENT_MODE, EXIT_SPAWN_FAILED, Confinement
from corral.agent.usage import UsageMonitor
from corral.protocol import (
    API_PREFIX,
    EPOCH_HEADER,
    AttachStep,
    Command,
    CommandBatch,
    Event,
    EventBatch,
    InfrastructureFailure,
    LaunchJob,
    LaunchStep,
    NodeFinished,
    NodeStarted,
    NodeUnhealthy,
    Registration,
    RegistrationReply,
    SignalJob,
    StepFinished,
    TaskExit,
    UsageReport,
)
from corral.slurm.common.leader import LEADER_HEADER, NOT_LEADER_STATUS
from corral.unix_auth_socket import close as close_auth_socket

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 2.0
REQUEST_TIMEOUT_S = 10.0
LOG_EVERY_N_FAILURES = 30
# Jobs the controller wants gone when it answers a registration are SIGKILLed; how long the agent waits for
# their tasks to go before it takes commands (and writes the contact that thaws what is left).
KILL_ON_REGISTER_WAIT_S = 10.0
MAX_EVENTS_PER_BATCH = 100
# How often the usage loop looks for jobs due a sample (each has its interval, at least this).
MIN_USAGE_TICK_S = 1.0
# How many (job, restart) launches to remember for ignoring re-sent commands.
REMEMBERED_LAUNCHES = 10_000
# Statuses that mean "this event batch will never be accepted": dropping it beats wedging the outbox.
REJECTED_STATUSES = (400, 422)


class Backoff:
    """Capped exponential delay between retries, logging the first failure of a streak only."""

    def __init__(self, what: str, initial_s: float = BACKOFF_INITIAL_S, max_s: float = BACKOFF_MAX_S):
        self._what = what
        self._initial_s = initial_s
        self._max_s = max_s
        self.delay_s = initial_s
        self.failures = 0

    async def failed(self, reason: str) -> None:
        self.failures += 1
        # The first failure of a streak, then about once a minute: visible without flooding the log.
        level = logging.WARNING if self.failures % LOG_EVERY_N_FAILURES == 1 else logging.DEBUG
        log.log(level, "%s failed (%s); retrying every %.1fs at most", self._what, reason, self._max_s)
        await asyncio.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, self._max_s)

    def succeeded(self) -> None:
        if self.failures:
            log.info("%s works again after %d failed attempt(s)", self._what, self.failures)
        self.failures = 0
        self.delay_s = self._initial_s


class Agent:
    """One node's agent. The constructor does no I/O; `await run()` works until cancelled.

    Cancelling `run()` stops talking to the controller and leaves running tasks alone, as a slurmd
    restart does.
    """

    def __init__(
        self,
        *,
        controller_url: str | Sequence[str],
        secret: str,
        node: str,
        inventory: Inventory,
        spool_dir: Path,
        address: str = "127.0.0.1",
        base_env: Mapping[str, str] | None = None,
        max_poll_wait_s: float = 30.0,
        confinement: Confinement = DEVELOPMENT_MODE,
        cgroups_status: str = "",
        features: Sequence[str] = (),
        ca_file: str | None = None,
        auth_socket: str | None = None,
        health: HealthConfig | None = None,
        usage: UsageMonitor | None = None,
    ) -> None:
        """`controller_url`: one controller's URL, or every controller's (their leader is followed). `ca_file`
        verifies an https:// controller (else the system's trusted CAs do). `auth_socket`: serve this host's
        users their credentials there (auth_socket.py). `health`: the node's health checks (health.py); a
        failure is posted as NodeUnhealthy, and the controller drains the node."""
        self.node = node
        urls = [controller_url] if isinstance(controller_url, str) else list(controller_url)
        self._controller_urls = tuple(url.rstrip("/") for url in urls)
        self._controller_url = self._controller_urls[0]  # the leader as last found
        self._ca_file = ca_file
        self._auth_socket = auth_socket
        self._secret = secret
        self._address = address
        self._inventory = inventory
        self._spool_dir = Path(spool_dir)
        self._task_spool = TaskSpool(self._spool_dir)
        self._contact = Contact(self._task_spool.contact)  # for self-fencing (contact.py, decision 0017)
        self._unkillable: list[TaskRecord] = []  # leftover tasks that survived the sweep at start
        # What every task gets besides its job's own environment (__main__.task_variables); never os.environ.
        self._base_env = dict(base_env or {})
        self._max_poll_wait_s = max_poll_wait_s
        self._confinement = confinement
        self._cgroups_status = cgroups_status  # what the registration says about isolation
        self._features = list(features)  # --feature: what sbatch --constraint matches
        self._poll_wait_s = max_poll_wait_s
        self._epoch: str | None = None
        self._leader_epoch = 0  # the highest lease epoch any controller reply carried
        self._after_seq = 0
        self._runners: dict[int, JobRunner] = {}  # jobs with tasks running here
        self._launched: OrderedDict[tuple[int, int], None] = OrderedDict()  # (job id, restart count)
        self._steps: dict[tuple[int, int], StepRunner] = {}  # (job id, step id) -> steps running here
        # (job id, step id, restart count) of the steps launched here, for ignoring re-sent commands.
        self._launched_steps: OrderedDict[tuple[int, int, int], None] = OrderedDict()
        self._outbox: list[Event] = []
        self._batch_events = MAX_EVENTS_PER_BATCH  # fewer after the controller refused a batch as too large
        # id(a NodeFinished or StepFinished in the outbox) -> its runner, whose spool records go once the
        # controller has the event: a restarted agent reports an end the controller never got.
        self._releases: dict[int, JobRunner | StepRunner] = {}
        self._outbox_ready = asyncio.Event()
        self._register_lock = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._client: httpx.AsyncClient | None = None
        self._health = None if health is None else HealthMonitor(
            health, node, self._report_unhealthy, nvml=inventory.source == "nvml")
        self._usage = usage or UsageMonitor()  # what each job and step uses here (usage.py)
        self._replicas = Replicas(node, address, self._spool_dir, self._base_env, self._post)  # ports, probes
        self._mps = MpsDaemon()  # for jobs on a share of a GPU, where the node has MPS (mps.py)

    @property
    def controller_url(self) -> str:
        """The controller the agent talks to: the leader, as last found."""
        return self._controller_url

    @property
    def running_jobs(self) -> list[int]:
        """Jobs with tasks here: their own, or only steps' (an allocation whose batch runs elsewhere)."""
        return sorted(set(self._runners) | {job_id for job_id, _ in self._steps})

    @property
    def running_steps(self) -> list[tuple[int, int]]:
        return sorted(self._steps)

    @property
    def unacknowledged_finished_jobs(self) -> list[int]:
        return sorted({e.job_id for e in self._outbox if isinstance(e, NodeFinished)})

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

    def _tls_context(self) -> Any:
        """The verifying SSL context for an https:// controller; True (httpx's default, unused) for http://."""
        if not self._controller_url.startswith("https:"):
            return True
        from corral.tls_client import client_context

        return client_context(self._ca_file)  # TlsConfigError: main() loaded it once already

    def _describe_error(self, exc: Exception) -> str:
        if self._controller_url.startswith("https:"):
            from corral.tls_client import tls_failure

            message = tls_failure(exc, self._controller_url, self._ca_file)
            if message:
                return message
        return _describe_error(exc)

    # -- following the leader

    def _misdirected(self, response: httpx.Response, asked: str) -> bool:
        """Whether `response` is a standby's 421; then the next request goes to the leader it names, if
        any, else to the next controller."""
        if response.status_code != NOT_LEADER_STATUS:
            return False
        leader = response.headers.get(LEADER_HEADER) or _leader_in(response)
        self._move_from(asked, leader.rstrip("/") if leader else None, "is not the leader")
        return True

    def _unreachable(self, exc: Exception, asked: str) -> None:
        """A connection that failed before the request went out: try the next controller."""
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            self._move_from(asked, None, "cannot be reached")

    def _move_from(self, asked: str, leader: str | None, why: str) -> None:
        if self._controller_url != asked or self._client is None:
            return  # another loop moved already
        if leader is None or leader == asked:
            if len(self._controller_urls) == 1:
                return
            index = self._controller_urls.index(asked) if asked in self._controller_urls else -1
            leader = self._controller_urls[(index + 1) % len(self._controller_urls)]
        log.info("controller %s %s: talking to %s", asked, why, leader)
        self._controller_url = leader
        self._client.base_url = httpx.URL(leader)

    # -- tasks of an earlier life

    async def kill_recorded_tasks(self, why: str) -> None:
        """Kill the tasks the spool records (an earlier agent's, or this one's when it stops) and wait
        until they are gone. Those that survive SIGKILL keep their GPUs out of any launch."""
        killed, self._unkillable = await asyncio.to_thread(sweep, self._task_spool)
        for record in killed:
            log.warning("killed the tasks of %s: %s", record.describe(), why)
        if self._confinement.cgroups is not None:  # and whatever they started, setsid or not
            for cgroup in self._confinement.cgroups.leftover_jobs():
                log.warning("killing what is left in %s: %s", cgroup.path, why)
                await cgroup.kill()
        for record in self._unkillable:
            log.error("the leftover tasks of %s outlived SIGKILL: launches onto its GPUs are refused",
                      record.describe())

    async def adopt_recorded_tasks(self) -> None:
        """Adopt what an earlier agent left running here (adoption.py); kill the rest, and whatever is left
        in the cgroups of jobs and steps not adopted. Those that survive SIGKILL keep their GPUs out of any
        launch."""
        found = await asyncio.to_thread(find_adoptable, self._task_spool)
        for job_id, step_id, why in found.lost:
            log.warning("cannot adopt %s: %s", f"job {job_id}" if step_id is None else f"step {job_id}.{step_id}", why)
        killed, self._unkillable = await asyncio.to_thread(sweep, self._task_spool, SWEEP_GRACE_S, found.to_kill)
        for record in killed:
            log.warning("killed the tasks of %s: they cannot be adopted", record.describe())
        for adoptable in found.adoptable:
            self._adopt(adoptable)
        leaders = {record.leader for adoptable in found.adoptable for record in adoptable.records}
        await asyncio.to_thread(forget_exits, self._task_spool.directory, leaders)
        for launch, why in found.killed_jobs:
            exits = [TaskExit(rank=t.rank, exit_code=0, signal=signal.SIGKILL) for t in launch.tasks]
            failure = InfrastructureFailure(kind="leader-killed", reason=f"{why}, while no agent watched it")
            self._post(NodeFinished(job_id=launch.job_id, tasks=exits, infrastructure=failure,
                                    restart_count=launch.restart_count))
        for step in found.lost_steps:
            exits = [TaskExit(rank=t.rank, exit_code=0, signal=signal.SIGKILL) for t in step.tasks]
            self._post(StepFinished(job_id=step.job_id, step_id=step.step_id, tasks=exits,
                                    error=f"lost on {self.node}: its tasks died while no agent watched them"))
        if self._confinement.cgroups is not None:  # whatever the others started, setsid or not
            kept = {(a.launch.job_id, a.launch.step_id if isinstance(a.launch, LaunchStep) else None)
                    for a in found.adoptable}
            for cgroup in self._confinement.cgroups.leftover_jobs():
                await _kill_unadopted(cgroup, kept)
        for record in self._unkillable:
            log.error("the leftover tasks of %s outlived SIGKILL: launches onto its GPUs are refused",
                      record.describe())

    def _adopt(self, adoptable: Adoptable) -> None:
        launch, records = adoptable.launch, adoptable.records
        if isinstance(launch, LaunchJob):
            job = JobRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                            confinement=self._confinement)
            job.adopt(records, adoptable.launch_json)
            self._replicas.adopt(launch)
            self._runners[launch.job_id] = job
            self._launched[(launch.job_id, launch.restart_count)] = None
            self._spawn_background(self._drive(job), f"job-{launch.job_id}")
            what = f"job {launch.job_id}"
        else:
            step = StepRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                              confinement=self._confinement)
            step.adopt(records, adoptable.launch_json)
            self._steps[step.key] = step
            self._launched_steps[(launch.job_id, launch.step_id, launch.restart_count)] = None
            self._spawn_background(self._drive_step(step), f"step-{launch.job_id}.{launch.step_id}")
            what = f"step {launch.job_id}.{launch.step_id}"
        log.info("adopted %s: %d task(s), still running or ended while no agent watched", what, len(records))

    def _busy_devices(self, launch: LaunchJob | LaunchStep) -> str | None:
        """Why the launch's devices may not go to its job: a live task of another job holds some of them,
        or None. Shares of one device (the controller keeps their sum within it) do not exclude each other."""
        job_id, gpus = launch.job_id, launch.node_gpus
        runners: list[JobRunner | StepRunner] = [*self._runners.values(), *self._steps.values()]
        holders = [(r.job_id, tuple(r.launch.node_gpus)) for r in runners
                   if r.holds_devices and not (launch.share and r.launch.share)]
        self._unkillable = [r for r in self._unkillable if live_members(r)]
        holders += [(r.job_id, r.gpus) for r in self._unkillable]
        for other, held in holders:
            shared = sorted(set(held) & set(gpus))
            if other != job_id and shared:
                return (f"GPU{'s' if len(shared) > 1 else ''} {','.join(map(str, shared))} of node {self.node} "
                        f"still in use by job {other}, whose tasks there have not exited: refusing to start "
                        f"job {job_id} there")
        return None

    # -- registration

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

    def _handle(self, command: Command) -> None:
        if command.seq and command.seq <= self._after_seq:
            return  # re-delivered after a lost poll reply: already handled
        self._after_seq = max(self._after_seq, command.seq)
        if isinstance(command, LaunchJob):
            self._launch(command)
        elif isinstance(command, LaunchStep):
            self._launch_step(command)
        elif isinstance(command, SignalJob):
            self._signal(command)
        elif isinstance(command, AttachStep):
            self._attach(command)

    def _attach(self, command: AttachStep) -> None:
        """sattach: the step's I/O goes to one more listener too (while the step runs here)."""
        step = self._steps.get((command.job_id, command.step_id))
        if step is None:
            log.info("sattach for step %d.%d, which does not run here: ignored", command.job_id, command.step_id)
            return
        self._spawn_background(step.attach(command.io_host, command.io_port, command.io_token),
                               f"attach-{command.job_id}.{command.step_id}")

    def _signal(self, command: SignalJob) -> None:
        """A job's signal: to its own tasks ("batch"), its steps ("steps", maybe only `step_id`), or both;
        a draining replica's after its `drain_s`."""
        if command.drain_s > 0:
            undrained = command.model_copy(update={"drain_s": 0.0})
            asyncio.get_running_loop().call_later(command.drain_s, self._signal, undrained)
            return
        job_id, reason = command.job_id, command.reason
        reached = 0
        # Steps first: their closing lines leave for srun before the batch shell (srun's parent) is signalled.
        if command.target in ("all", "steps"):
            reached += self._kill_steps(job_id, command.signal, command.grace_s, command.step_id, reason)
        if command.target in ("all", "batch"):
            reached += self._start_kill(job_id, command.signal, command.grace_s, steps=False, reason=reason)
        if not reached:
            log.debug("signal for job %d (%s), which does not run here: ignored", job_id, command.target)

    def _launch(self, launch: LaunchJob) -> None:
        key = (launch.job_id, launch.restart_count)
        if key in self._launched or launch.job_id in self._runners:
            log.debug("launch of job %d (restart %d) already seen: ignored", *key)
            return
        self._launched[key] = None
        while len(self._launched) > REMEMBERED_LAUNCHES:
            self._launched.popitem(last=False)
        launch, unservable = self._replicas.prepare(launch)
        runner = JobRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                           refusal=self._busy_devices(launch) or unservable,
                           confinement=self._confinement)
        self._runners[launch.job_id] = runner
        self._spawn_background(self._drive(runner), f"job-{launch.job_id}")

    def _launch_step(self, launch: LaunchStep) -> None:
        key = (launch.job_id, launch.step_id)
        seen = (launch.job_id, launch.step_id, launch.restart_count)
        if seen in self._launched_steps or key in self._steps:
            log.debug("launch of step %d.%d (restart %d) already seen: ignored", *seen)
            return
        self._launched_steps[seen] = None
        while len(self._launched_steps) > REMEMBERED_LAUNCHES:
            self._launched_steps.popitem(last=False)
        runner = StepRunner(launch, node_name=self.node, spool_dir=self._spool_dir, base_env=self._base_env,
                            refusal=self._busy_devices(launch),
                            confinement=self._confinement)
        self._steps[key] = runner
        self._spawn_background(self._drive_step(runner), f"step-{key[0]}.{key[1]}")

    async def _drive_step(self, runner: StepRunner) -> None:
        """Post the step's StepFinished; the step leaves `running_steps` when its tasks are done."""
        try:
            async for event in runner.run():
                self._steps.pop(runner.key, None)
                event.usage = self._usage.final(runner.job_id, runner.step_id)
                self._releases[id(event)] = runner
                self._post(event)
        except Exception as exc:  # a bug must not take the agent down, nor leave the step unreported
            log.exception("step %d.%d: runner failed", *runner.key)
            self._steps.pop(runner.key, None)
            exits = [TaskExit(rank=t.rank, exit_code=EXIT_SPAWN_FAILED) for t in runner.launch.tasks]
            failure = InfrastructureFailure(kind="agent-error", reason=f"the agent's step runner failed: {exc}")
            self._post(StepFinished(job_id=runner.job_id, step_id=runner.step_id, tasks=exits,
                                    infrastructure=failure))

    async def _drive(self, runner: JobRunner) -> None:
        """Forward a job's events to the outbox; the job leaves `running_jobs` when its tasks are done. With
        health checks before jobs, a failing one refuses the launch: NodeUnhealthy goes first, so the
        controller requeues the job rather than failing it."""
        try:
            if self._health is not None and not runner.adopted:
                reason = await self._health.check_before_job(runner.job_id)
                if reason is not None:
                    runner.refuse(f"{self.node} failed its health check: {reason}")
            if runner.launch.share is not None and runner.adopted:
                self._mps.adopt(runner.job_id)  # its tasks outlived the agent, and so did the daemon
            elif runner.launch.share is not None:
                try:
                    await self._mps.acquire(runner.job_id)
                except MpsError as exc:
                    runner.refuse(f"{self.node}: {exc}")
            if runner.adopted:
                self._replicas.start_probes(runner)
            async for event in runner.run():
                if isinstance(event, NodeFinished):
                    self._replicas.finished(runner.job_id)
                    await self._mps.release(runner.job_id)  # not when the agent stops: its tasks live on
                    self._runners.pop(runner.job_id, None)
                    event.usage = self._usage.final(runner.job_id, None)
                    self._releases[id(event)] = runner
                else:
                    event.ports = self._replicas.ports(runner.job_id)
                self._post(event)
                if isinstance(event, NodeStarted):
                    self._replicas.start_probes(runner)
        except Exception as exc:  # a bug must not take the agent down, nor leave the job unreported
            log.exception("job %d: runner failed", runner.job_id)
            self._replicas.finished(runner.job_id)  # before its end is posted: no probe report after it
            await self._mps.release(runner.job_id)
            self._runners.pop(runner.job_id, None)
            exits = [TaskExit(rank=t.rank, exit_code=EXIT_SPAWN_FAILED) for t in runner.launch.tasks]
            # The agent's own failure, not the job's: the controller requeues it as after a node failure.
            failure = InfrastructureFailure(kind="agent-error", reason=f"the agent's job runner failed: {exc}")
            self._post(NodeFinished(job_id=runner.job_id, tasks=exits, infrastructure=failure,
                                    restart_count=runner.launch.restart_count))
        finally:
            self._replicas.finished(runner.job_id)  # also when the agent stops: no probe outlives it

    def _start_kill(self, job_id: int, signum: int, grace_s: float, *, steps: bool = True,
                    reason: str | None = None) -> int:
        """Signal a job's own tasks here and (unless `steps` is False) its steps; how many runners.
        `reason` (corral.kill_reasons): the runners write slurmstepd's closing line for it."""
        reached = 0
        runner = self._runners.get(job_id)
        if runner is not None:
            self._spawn_background(runner.kill(signum, grace_s, reason), f"kill-{job_id}")
            reached += 1
        if steps:
            reached += self._kill_steps(job_id, signum, grace_s, reason=reason)
        return reached

    def _kill_steps(self, job_id: int, signum: int, grace_s: float, step_id: int | None = None,
                    reason: str | None = None) -> int:
        reached = 0
        for (job, step), runner in list(self._steps.items()):
            if job == job_id and step_id in (None, step):
                self._spawn_background(runner.kill(signum, grace_s, reason), f"kill-{job}.{step}")
                reached += 1
        return reached

    def _spawn_background(self, coroutine: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._background.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(self._background.discard)

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

    def _report_unhealthy(self, reason: str) -> None:
        self._post(NodeUnhealthy(reason=reason))

    def _post(self, event: Event) -> None:
        self._outbox.append(event)
        self._outbox_ready.set()

    async def _send_loop(self) -> None:
        backoff = Backoff("event delivery")
        while True:
            await self._outbox_ready.wait()
            if not self._outbox:
                self._outbox_ready.clear()
                self._batch_events = MAX_EVENTS_PER_BATCH  # what was too large has gone
                continue
            batch = self._outbox[:self._batch_events]
            delivered = await self._send(batch, backoff)
            if delivered:
                for event in batch:
                    runner = self._releases.pop(id(event), None)
                    if runner is not None:
                        await asyncio.to_thread(runner.release)
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


def _leader_in(response: httpx.Response) -> str | None:
    """The `leader` of a 421's JSON body, where the header did not come through."""
    try:
        leader = response.json().get("leader")
    except (ValueError, AttributeError):
        return None
    return leader if isinstance(leader, str) and leader else None


async def _kill_unadopted(cgroup: JobCgroup, kept: set[tuple[int, int | None]]) -> None:
    """Kill a leftover job cgroup, or, for an adopted job, the leaves of its steps (or batch) not adopted."""
    number = cgroup.path.name.removeprefix("job_")
    adopted = {step for job, step in kept if number.isascii() and number.isdigit() and job == int(number)}
    if not adopted:
        log.warning("killing what is left in %s: not adopted", cgroup.path)
        await cgroup.kill()
        return
    leaves = {"batch" if step is None else f"step_{step}" for step in adopted}
    for leaf in [p for p in cgroup.path.iterdir() if p.is_dir() and p.name not in leaves]:
        log.warning("killing what is left in %s: not adopted", leaf)
        await cgroup.kill(leaf.name)


def _describe_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


@functools.cache
def _agent_version() -> str:
    try:
        return metadata.version("corral")
    except metadata.PackageNotFoundError:
        return ""
