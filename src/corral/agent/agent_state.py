"""The agent's state and its link to the controller: TLS, following the leader, the outbox's door.

The node agent (agent.py) is built in layers, each a class over the one before: this state, then launches
(launches.py: the commands that start, signal and adopt work), then registration (registration.py), then
the loops that poll, send and sample (agent.py). The rules they keep together are in agent.py's docstring.
"""
from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from corral.agent.contact import Contact
from corral.agent.discovery import Inventory
from corral.agent.health import HealthConfig, HealthMonitor
from corral.agent.mps import MpsDaemon
from corral.agent.replicas import Replicas
from corral.agent.runner import JobRunner
from corral.agent.step_runner import StepRunner
from corral.agent.task_spool import TaskRecord, TaskSpool
from corral.agent.tasks import DEVELOPMENT_MODE, Confinement
from corral.agent.usage import UsageMonitor
from corral.protocol import (
    Event,
    NodeFinished,
    NodeStarted,
    NodeUnhealthy,
)
from corral.slurm.common.leader import LEADER_HEADER, NOT_LEADER_STATUS

log = logging.getLogger(__name__)

BACKOFF_INITIAL_S = 0.2
BACKOFF_MAX_S = 2.0
REQUEST_TIMEOUT_S = 10.0
LOG_EVERY_N_FAILURES = 30
MAX_EVENTS_PER_BATCH = 100


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


class AgentState:
    """One node agent's state, its link to the controller and the outbox's door; no I/O until run()."""

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
        # Set once the outbox holds more than task starts: until then the send loop waits START_LINGER_S
        # for more (agent.py), since a start is nothing the controller's scheduler waits for.
        self._outbox_urgent = asyncio.Event()
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


    def _spawn_background(self, coroutine: Any, name: str) -> None:
        task = asyncio.get_running_loop().create_task(coroutine, name=name)
        self._background.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(self._background.discard)


    # -- events

    def _report_unhealthy(self, reason: str) -> None:
        self._post(NodeUnhealthy(reason=reason))

    def _post(self, event: Event) -> None:
        self._outbox.append(event)
        if not isinstance(event, NodeStarted):
            self._outbox_urgent.set()
        self._outbox_ready.set()



def _leader_in(response: httpx.Response) -> str | None:
    """The `leader` of a 421's JSON body, where the header did not come through."""
    try:
        leader = response.json().get("leader")
    except (ValueError, AttributeError):
        return None
    return leader if isinstance(leader, str) and leader else None


def _describe_error(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
