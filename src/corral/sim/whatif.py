"""`corral advise`'s what-ifs: the cluster's own finished jobs (its accounting records) replayed through the
simulator under its live configuration (the baseline) and under variations of it, each one change an
administrator could make: cohort lending between quota queues that cannot lend today, the other node
placement (bestfit <-> fgd), and time limits as long as the jobs really ran (what tighter `--time` would
buy). The baseline's waits are set beside the waits the jobs really had, so that a reader can judge how
closely the replay follows the cluster.

Everything here is a function of its inputs (the API's JSON bodies); the replay runs in the caller's
process (the CLI), never in the controller.
"""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from corral import hostlist
from corral.api.schemas import JobSubmit
from corral.api.tenancy import TenancySpec
from corral.core.config import SchedulerConfig
from corral.core.model import TaskShape
from corral.engine.config import EngineConfig, PartitionConfig
from corral.sim.driver import SimNode, SimSubmission, Simulation

MAX_JOBS = 20_000  # the newest finished jobs replayed at most
# A variation is recommended when its mean wait is at least this much lower than the baseline replay's ...
IMPROVEMENT = 0.20
# ... and the baseline's mean wait is at least this long (shorter waits leave nothing worth changing).
MIN_WAIT_S = 60.0
# The baseline replay follows the cluster closely enough to advise on when its mean wait is within this
# share (or MIN_WAIT_S) of the real one.
FIDELITY = 0.5
LENDING_COHORT = "advise-cohort"
TASK_MIX_SHAPES = 8  # the most common job shapes that make the fgd variation's task_mix
# The exact-limits variation is tried when the jobs' median time limit is this many times their runtime.
LOOSE_LIMITS = 2.0
# The baseline replay is advised on only while it runs all but at most this share of the jobs.
MAX_NOT_REPLAYED = 0.1


@dataclass(frozen=True)
class Setup:
    """What the engine is built from: the live configuration, or a variation of it."""

    partitions: tuple[PartitionConfig, ...]
    scheduler: SchedulerConfig
    tenancy: TenancySpec
    nodes: tuple[SimNode, ...]


@dataclass(frozen=True)
class HistoryJob:
    """A finished job as the replay resubmits it: its request, when it came, how long it really ran."""

    id: int
    account: str
    submit_time: float
    start_time: float
    end_time: float
    gpus: int
    request: JobSubmit

    @property
    def runtime_s(self) -> float:
        return self.end_time - self.start_time

    @property
    def wait_s(self) -> float:
        return self.start_time - self.submit_time


@dataclass(frozen=True)
class Figures:
    jobs: int  # jobs counted (the account's, with --account)
    mean_wait_s: float
    p90_wait_s: float
    utilisation: float  # GPU-seconds held / (GPUs x the span from the first submission to the last end)

    def to_dict(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "mean_wait_s": round(self.mean_wait_s, 1), "p90_wait_s": round(self.p90_wait_s, 1),
                "utilisation": round(self.utilisation, 4)}


@dataclass(frozen=True)
class Variation:
    key: str
    title: str  # what changes, in a user's words
    change: str  # the configuration that makes it so
    setup: Callable[[Setup], Setup]
    limits: Callable[[HistoryJob], int] | None = None  # the time limit to resubmit a job with (None: its own)


@dataclass(frozen=True)
class Replay:
    figures: Figures
    refused: int  # submissions the engine refused (e.g. a user no longer in the tenancy)
    unfinished: int  # replayed jobs that never started
    wall_s: float
    refusal: str | None = None  # the most common refusal, as the engine words it


def live_setup(partitions: Sequence[Mapping[str, Any]], scheduler: Mapping[str, Any], tenancy: Mapping[str, Any],
               nodes: Sequence[Mapping[str, Any]]) -> Setup:
    """The live configuration from the API's bodies (GET /partitions, /scheduler, /tenancy, /nodes)."""
    parts = tuple(PartitionConfig(p["name"], nodes=hostlist.compress(list(p["nodes"])), default=p["default"],
                                  max_time_s=p["max_time_s"], default_time_s=p["default_time_s"], up=p["up"],
                                  priority_job_factor=p.get("priority_job_factor", 1)) for p in partitions)
    mix = tuple((TaskShape(t["gpus"], t["gpu_milli"], t["cpus"], t["gpu_model"]), float(t["weight"]))
                for t in scheduler["task_mix"])
    sched = SchedulerConfig(max_reservations=scheduler["max_reservations"],
                            max_jobs_considered=scheduler["max_jobs_considered"], backfill=scheduler["backfill"],
                            placement=scheduler["placement"], task_mix=mix, fgd_cpu_weight=scheduler["fgd_cpu_weight"])
    sim_nodes = tuple(SimNode(n["name"], len(n["gpus"]), n["cpus"], n["mem_mib"],
                              n["gpus"][0]["model"] if n["gpus"] else "none") for n in nodes)
    return Setup(parts, sched, TenancySpec.model_validate(tenancy), sim_nodes)


def history_jobs(records: Sequence[Mapping[str, Any]], max_jobs: int = MAX_JOBS) -> tuple[list[HistoryJob], list[str]]:
    """The finished jobs to replay (the newest `max_jobs` by submission), and notes on what was left out."""
    ran = [r for r in records if r.get("start_time") is not None and r.get("end_time") is not None]
    ran.sort(key=lambda r: (r["submit_time"], r["id"]))
    notes = []
    skipped = len(records) - len(ran)
    if len(ran) > max_jobs:
        notes.append(f"only the newest {max_jobs} of {len(ran)} finished jobs replayed")
        ran = ran[-max_jobs:]
    if skipped:
        notes.append(f"{skipped} job(s) not replayed: never started, or still running")
    jobs = []
    for r in ran:
        try:
            jobs.append(_history_job(r))
        except ValidationError:  # a record of an older controller whose request today's schema refuses
            continue
    if len(jobs) < len(ran):
        notes.append(f"{len(ran) - len(jobs)} job(s) not replayed: their request is not one a submission takes")
    return jobs, notes


def _history_job(record: Mapping[str, Any]) -> HistoryJob:
    request = JobSubmit(
        name=record["name"] or f"job{record['id']}", user=record["user"], argv=["true"], workdir="/",
        partition=record["partition"] or None, nodes=record["num_nodes"], ntasks_per_node=record["tasks_per_node"],
        gpus_per_node=record["gpus_per_node"], cpus_per_task=record["cpus_per_task"],
        mem_mib=record["mem_per_node_mib"] or None, time_limit_s=record["time_limit_s"],
        account=record.get("account") or None, qos=record.get("qos") or None, queue=record.get("queue") or None,
        gpu_share=record.get("gpu_share") or None)
    start = max(record["start_time"], record["submit_time"])
    return HistoryJob(record["id"], record.get("account", ""), record["submit_time"], start,
                      max(record["end_time"], start), record["total_gpus"], request)


def real_figures(jobs: Sequence[HistoryJob], capacity_gpus: int, account: str | None = None) -> Figures:
    """What the replayed jobs really waited, and the utilisation they made over the same span."""
    counted = [j for j in jobs if account is None or j.account == account]
    waits = [j.wait_s for j in counted]
    held = sum(j.gpus * j.runtime_s for j in jobs)
    span = (max((j.end_time for j in jobs), default=0.0) - min((j.submit_time for j in jobs), default=0.0))
    return Figures(len(counted), _mean(waits), quantile(waits, 0.9), _ratio(held, capacity_gpus * span))


def variations(setup: Setup, jobs: Sequence[HistoryJob]) -> list[Variation]:
    """The what-ifs that mean something for this configuration and history (each one change)."""
    found = []
    lending = _lending(setup)
    if lending is not None:
        found.append(lending)
    found.append(_placement(setup, jobs))
    runtimes = sorted(j.request.time_limit_s / max(j.runtime_s, 1.0) for j in jobs if j.request.time_limit_s)
    if setup.scheduler.backfill and runtimes and quantile(runtimes, 0.5) >= LOOSE_LIMITS:
        found.append(Variation(
            "exact-limits", "time limits as long as each job really ran (plus a minute)",
            "users ask for tighter --time (backfill starts jobs in holes only as long as their limit)",
            lambda s: s, limits=_exact_limit))
    return found


def _exact_limit(job: HistoryJob) -> int:
    """The job's runtime and a minute, never more than it asked for."""
    exact = math.ceil(job.runtime_s) + 60
    return min(job.request.time_limit_s, exact) if job.request.time_limit_s else exact


def _lending(setup: Setup) -> Variation | None:
    """Every quota queue in one cohort (lending idle quota, reclaiming it by preemption), where at least two
    queues cannot lend to each other today."""
    queues = setup.tenancy.queues
    if len(queues) < 2 or (len({q.cohort for q in queues}) == 1 and queues[0].cohort is not None):
        return None
    names = ", ".join(q.name for q in queues)

    def joined(s: Setup) -> Setup:
        spec = s.tenancy.model_dump()
        for q in spec["queues"]:
            q["cohort"] = LENDING_COHORT
        return replace(s, tenancy=TenancySpec.model_validate(spec))

    return Variation("lending", f"cohort lending between {names}",
                     f'cohort = "{LENDING_COHORT}" on every [[queues]] entry ({names})', joined)


def _placement(setup: Setup, jobs: Sequence[HistoryJob]) -> Variation:
    if setup.scheduler.placement != "bestfit":
        return Variation("bestfit", "bestfit placement", '[scheduler] placement = "bestfit"',
                         lambda s: replace(s, scheduler=replace(s.scheduler, placement="bestfit", task_mix=())))
    mix = task_mix(jobs)
    toml = ", ".join(f"{{gpus = {shape.gpus}, cpus = {shape.cpus}, weight = {weight:g}}}" for shape, weight in mix)
    return Variation("fgd", "fragmentation-aware placement (fgd)",
                     f'[scheduler] placement = "fgd", task_mix = [{toml}]',
                     lambda s: replace(s, scheduler=replace(s.scheduler, placement="fgd", task_mix=mix)))


def task_mix(jobs: Sequence[HistoryJob]) -> tuple[tuple[TaskShape, float], ...]:
    """fgd's typical tasks: the most common shapes (GPUs and CPUs per node) of the jobs, by count."""
    shapes = Counter((j.request.gpus_per_node or 0, (j.request.ntasks_per_node or 1) * (j.request.cpus_per_task or 1))
                     for j in jobs if j.request.gpus_per_node)
    common = shapes.most_common(TASK_MIX_SHAPES) or [((1, 1), 1)]
    return tuple((TaskShape(gpus, cpus=cpus), float(count)) for (gpus, cpus), count in common)


def replay(setup: Setup, jobs: Sequence[HistoryJob], account: str | None = None,
           limits: Callable[[HistoryJob], int] | None = None) -> Replay:
    """The jobs through the production engine under `setup`, submitted when they really were, each running
    as long as it really ran."""
    started = time.perf_counter()
    config = EngineConfig(partitions=setup.partitions, scheduler=setup.scheduler)
    sim = Simulation(config, setup.nodes, setup.tenancy)
    origin = min((j.submit_time for j in jobs), default=0.0)
    sim.submit(SimSubmission(j.submit_time - origin,
                             j.request if limits is None else j.request.model_copy(update={"time_limit_s": limits(j)}),
                             j.runtime_s) for j in jobs)
    result = sim.run()
    ended = {job.id: job for job in result.finished}
    waits, held, last_end = [], 0.0, 0.0
    unfinished = 0
    for index, job in enumerate(jobs):
        job_id = result.ids.get(index)
        if job_id is None:
            continue
        first, engine_job = result.first_starts.get(job_id), ended.get(job_id)
        if first is None or engine_job is None or engine_job.end_time is None:
            unfinished += 1
            continue
        held += engine_job.gpu_seconds
        last_end = max(last_end, engine_job.end_time)
        if account is None or job.account == account:
            waits.append(first - (job.submit_time - origin))
    figures = Figures(len(waits), _mean(waits), quantile(waits, 0.9),
                      _ratio(held, sum(n.gpus for n in setup.nodes) * last_end))
    refusals = Counter(result.refused.values()).most_common(1)
    return Replay(figures, len(result.refused), unfinished, time.perf_counter() - started,
                  refusals[0][0] if refusals else None)


def coverage_problem(jobs: int, baseline: Replay) -> str | None:
    """Why the baseline replay left too many of the `jobs` unrun to advise on (None: it ran nearly all).
    Jobs that ran under another configuration (a user or account added to the tenancy later, a node since
    removed) are refused or never start in today's."""
    not_run = baseline.refused + baseline.unfinished
    if not jobs or not_run <= MAX_NOT_REPLAYED * jobs:
        return None
    parts = []
    if baseline.refused:
        parts.append(f"refuses {baseline.refused} (e.g. {baseline.refusal})")
    if baseline.unfinished:
        parts.append(f"never starts {baseline.unfinished}")
    return (f"the live configuration {' and '.join(parts)} of the {jobs} jobs replayed: they ran under another "
            "configuration (were users, accounts, queues or nodes different in this period?)")


def fidelity_problem(actual: Figures, baseline: Figures) -> str | None:
    """Why the baseline replay is too far from what really happened to advise on (None: it is close)."""
    gap = abs(baseline.mean_wait_s - actual.mean_wait_s)
    if gap <= max(MIN_WAIT_S, FIDELITY * actual.mean_wait_s):
        return None
    return (f"the replay of the live configuration waits {duration(baseline.mean_wait_s)} on average where the "
            f"jobs really waited {duration(actual.mean_wait_s)}: it does not follow this cluster closely enough "
            f"to advise on (were the configuration, the nodes or the users different in this period?)")


def recommend(baseline: Replay, variation: Variation, outcome: Replay) -> str | None:
    """The advice a variation's replay supports, or None: its mean wait at least IMPROVEMENT lower than the
    baseline replay's, a baseline wait worth shortening, and no job it could not run that the baseline ran."""
    before, after = baseline.figures.mean_wait_s, outcome.figures.mean_wait_s
    if before < MIN_WAIT_S or after > (1 - IMPROVEMENT) * before:
        return None
    if outcome.unfinished > baseline.unfinished or outcome.refused > baseline.refused:
        return None
    return (f"{variation.title}: mean wait {duration(before)} -> {duration(after)} "
            f"({100 * (before - after) / before:.0f} % lower), p90 {duration(baseline.figures.p90_wait_s)} -> "
            f"{duration(outcome.figures.p90_wait_s)}, utilisation {100 * baseline.figures.utilisation:.1f} % -> "
            f"{100 * outcome.figures.utilisation:.1f} %. Change: {variation.change}")


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def quantile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default); 0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0
