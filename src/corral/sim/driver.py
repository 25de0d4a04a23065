"""The simulator's driver: the production Engine, fed from an event heap in simulated time.

No policy lives here. Submissions and job ends are events ordered by (time, sequence). A submission is a
JobSubmit that the engine accepts or refuses as it does for the live controller (a SubmissionRequested event); a
refusal is recorded in SimResult.refused with the message a user would get. After each batch
of simultaneous events the engine ticks and runs a scheduling cycle, exactly as the live controller does
when something changes, and otherwise at the engine's next deadline, as the pacer both loops use says
(engine/pacer.py, in simulated time). The engine is built with the SIMULATED profile: simulated agents
never go silent, and jobs start as soon as the policy allows. tests/sim/test_replay_equivalence.py checks
that the live controller, driven by fake agents and a fake clock, makes the same decisions. The engine's
commands are carried out by a stand-in for the agents: a Launch schedules the job's natural end (its real
duration from the trace), a Kill ends it after a short, configurable stopping delay, and a signal-only
Kill changes nothing. Services (SimService) are applied and deleted at their times through the same engine
events as the live controller's; their replicas run until stopped, or each run ends after `run_s` (a
crashing service, restarted by the engine with its backoff).
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu
from corral.engine.admission import AdmissionError
from corral.engine.build import build_engine
from corral.engine.commands import Kill, Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.engine import Engine
from corral.engine.events import (
    CycleDue,
    NodeRegistered,
    ServiceApplied,
    ServiceDeleted,
    SubmissionRequested,
    TasksFinished,
    TasksStarted,
    TimePassed,
)
from corral.engine.membership import Inventory
from corral.engine.pacer import CyclePacer
from corral.engine.records import Job, JobState


@dataclass(frozen=True, slots=True)
class SimNode:
    name: str
    gpus: int
    cpus: int = 128
    mem_mib: int = 2_048_000
    gpu_model: str = "sim-gpu"
    features: frozenset[str] = frozenset()  # as its agent's --feature (the GPU model's type is discovered)


@dataclass(frozen=True, slots=True)
class SimSubmission:
    at_s: float
    request: JobSubmit  # decided as the live controller decides it (a SubmissionRequested event)
    duration_s: float  # how long the job (each task of an array) would run if nothing stopped it


@dataclass(frozen=True, slots=True)
class SimService:
    """A service applied at `at_s` by `user` (deleted at `delete_at_s` if given); each run of its replicas
    ends by itself after `run_s` (None: never)."""

    at_s: float
    spec: ServiceSpec
    user: str
    run_s: float | None = None
    delete_at_s: float | None = None


@dataclass
class SimResult:
    finished: list[Job] = field(default_factory=list)
    cycles: int = 0
    end_s: float = 0.0
    ids: dict[int, int] = field(default_factory=dict)  # submission index -> job id (an array's first task)
    refused: dict[int, str] = field(default_factory=dict)  # submission index -> why the engine refused it
    first_starts: dict[int, float] = field(default_factory=dict)  # job id -> when it was first launched


class _Submitted(dict[int, Job]):
    """Every job the simulation created, ended ones included: what dependencies on ended jobs read (the
    live controller reads its store)."""

    def get_job(self, job_id: int) -> Job | None:
        return self.get(job_id)


class Simulation:
    def __init__(self, config: EngineConfig, nodes: Iterable[SimNode], tenancy: TenancySpec | None = None,
                 stop_delay_s: float = 1.0, min_cycle_interval_s: float = 0.0, start_s: float = 0.0) -> None:
        # Every job the simulation created: what dependencies on ended jobs read (the live controller's store).
        self._submitted = _Submitted()
        engine = build_engine(config, SIMULATED, tenancy=tenancy, archive=self._submitted)
        for node in nodes:
            inventory = Inventory(tuple(Gpu(i, node.gpu_model) for i in range(node.gpus)), node.cpus,
                                  node.mem_mib, "127.0.0.1", features=node.features)
            engine.handle(NodeRegistered(node.name, inventory), now=start_s)
        self._start(engine, start_s, stop_delay_s, min_cycle_interval_s)

    @classmethod
    def resume(cls, engine: Engine, now: float, running_ends: dict[int, float], durations: dict[int, float],
               stop_delay_s: float = 1.0, min_cycle_interval_s: float = 0.0) -> Simulation:
        """A simulation that goes on from `engine` (built with the SIMULATED profile) as it is at `now`: each
        running job ends at `running_ends[id]`, each pending job runs `durations[id]` once launched. What
        start-time forecasts run forward (sim/forecast.py)."""
        sim = cls.__new__(cls)
        sim._submitted = _Submitted()
        sim._start(engine, now, stop_delay_s, min_cycle_interval_s)
        sim._durations.update(durations)
        for job_id, at in running_ends.items():
            sim._end_at(job_id, max(at, now), 0)
        sim._push(now, "wake", None)  # a first cycle at `now`, as the live loop would run one
        return sim

    def _start(self, engine: Engine, now: float, stop_delay_s: float, min_cycle_interval_s: float) -> None:
        self.engine = engine
        self.now = now
        self.stop_delay_s = stop_delay_s
        self.pacer = CyclePacer.simulated(min_cycle_interval_s)
        self._events: list[tuple[float, int, str, object]] = []
        self._seq = itertools.count()
        self._durations: dict[int, float] = {}
        self._ends: dict[int, float] = {}  # job id -> the end event that counts for its current run
        self._replica_runs: dict[str, float | None] = {}  # service name -> how long each replica run lasts
        self.result = SimResult()

    def submit(self, submissions: Iterable[SimSubmission]) -> None:
        for index, sub in enumerate(submissions):
            self._push(sub.at_s, "submit", (index, sub))

    def apply_services(self, services: Iterable[SimService]) -> None:
        for service in services:
            self._push(service.at_s, "service", service)
            if service.delete_at_s is not None:
                self._push(service.delete_at_s, "service-delete", service.spec.name)

    def _push(self, at: float, kind: str, payload: object) -> None:
        heapq.heappush(self._events, (at, next(self._seq), kind, payload))

    def run(self, until_s: float = float("inf"), on_progress: Callable[[float], None] | None = None,
            done: Callable[[], bool] | None = None) -> SimResult:
        """Carry out events up to `until_s`, or until `done()` says so after a batch of simultaneous events."""
        while self._events and self._events[0][0] <= until_s:
            if done is not None and done():
                break
            now = self._events[0][0]
            self.now = now
            due = False
            while self._events and self._events[0][0] == now:
                _, _, kind, payload = heapq.heappop(self._events)
                due = self._handle(kind, payload, now) or due
            if due:
                self._cycle(now)
            if on_progress is not None:
                on_progress(now)
        self.result.end_s = self.now
        return self.result

    def _handle(self, kind: str, payload, now: float) -> bool:
        """Fold one event in; True if the controller would run a cycle for it."""
        engine = self.engine
        if kind == "submit":
            index, sub = payload
            try:
                first, tasks = engine.handle(SubmissionRequested(sub.request), now=now).reply
            except AdmissionError as exc:
                self.result.refused[index] = str(exc)
                return False  # the controller refuses it without waking its loop
            for job_id in tasks or [first]:
                self._durations[job_id] = sub.duration_s
                self._submitted[job_id] = engine.jobs[job_id]
            self.result.ids[index] = first
            return True
        if kind == "service":
            self._replica_runs[payload.spec.name] = payload.run_s
            self._carry_out(engine.handle(ServiceApplied(payload.spec, payload.user), now=now).commands, now)
            return True
        if kind == "service-delete":
            self._carry_out(engine.handle(ServiceDeleted(payload), now=now).commands, now)
            return True
        if kind == "end":
            job_id, at, sig = payload
            ended = engine.jobs.get(job_id)
            if ended is None or self._ends.get(job_id) != at:
                return False  # a stale end: the run it belonged to was stopped earlier
            # Its end may stop others (a service's old replica, replaced): carried out as the live controller does.
            result = engine.handle(*(TasksFinished(node, job_id, ((0, 0, sig),)) for node in list(ended.runs)), now=now)
            self._carry_out(result.commands, now)
            if ended.state.terminal:
                self.result.finished.append(ended)
            return True
        # "wake": the end of a cycle's hold (payload None), or the loop's timer, which counts only while
        # it is the pacer's one timer.
        return payload is None or self.pacer.rings(payload)

    def _cycle(self, now: float) -> None:
        at = self.pacer.next_cycle(now)
        if at > now:
            self._push(at, "wake", None)
            return
        engine = self.engine
        commands = engine.handle(TimePassed(), CycleDue(), now=now).commands
        self.pacer.cycle_ran(now, now)  # a simulated cycle takes no time
        self.result.cycles += 1
        self._carry_out(commands, now)
        timer = self.pacer.sleep(now, engine.next_deadline(now))
        if timer is not None:
            self._push(timer, "wake", timer)

    def _carry_out(self, commands, now: float) -> None:
        launched: set[int] = set()
        for cmd in commands:
            if isinstance(cmd, Launch) and cmd.job_id not in launched:
                launched.add(cmd.job_id)
                self.result.first_starts.setdefault(cmd.job_id, now)
                job = self.engine.jobs[cmd.job_id]
                self.engine.handle(*(TasksStarted(node, cmd.job_id) for node in job.runs), now=now)
                # A service the simulation did not apply itself (a forecast resumed from the live engine): its
                # replicas run until stopped, as they are meant to.
                duration = (self._replica_runs.get(job.spec.service) if job.spec.service
                            else self._durations[cmd.job_id])
                if duration is not None:  # a replica that never ends by itself has no end event
                    self._end_at(cmd.job_id, now + duration, 0)
            elif isinstance(cmd, Kill) and cmd.grace_s >= 0:
                self._end_at(cmd.job_id, now + min(self.stop_delay_s, cmd.grace_s), int(cmd.signal))

    def _end_at(self, job_id: int, at: float, sig: int) -> None:
        if job_id in self._ends and self._ends[job_id] <= at and sig != 0:
            current = self._ends[job_id]
            if current >= self.now:
                return  # already ending sooner
        self._ends[job_id] = at
        self._push(at, "end", (job_id, at, sig))


def finished_by_state(result: SimResult) -> dict[JobState, int]:
    counts: dict[JobState, int] = {}
    for job in result.finished:
        counts[job.state] = counts.get(job.state, 0) + 1
    return counts
