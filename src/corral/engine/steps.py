"""Job steps: srun inside a running job's allocation (Slurm's N.0, N.1, ...).

A step runs on some of the job's nodes with a task layout of its own and uses the job's resources
there; steps do not take resources from each other (as Slurm's `--overlap`). The scheduler never sees
steps: they live and die inside their job. A job that ends (its batch shell exits, it is cancelled or
times out, its holder completes it) kills the steps still running and ends only once they have exited.
"""
from __future__ import annotations

import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from corral import kill_reasons
from corral.engine.commands import Command, Kill, LaunchStep
from corral.engine.node_choice import NodeChoiceError, parse_constraint
from corral.engine.outcome import OOM_EXIT, node_result
from corral.engine.records import InfrastructureFailure, Job, JobState, NodeRun, Step

# What a step that was still running ends as when its job ends for this reason.
_ENDED_BY_JOB = {JobState.NODE_FAIL: "NODE_FAIL"}


class StepRefused(ValueError):
    """The step cannot run in this allocation (the message says why, in Slurm's words where it has some)."""


class JobNotRunning(StepRefused):
    pass


@dataclass(frozen=True, slots=True)
class StepRequest:
    name: str
    nodes: int | None = None
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # srun --constraint: only the allocation's nodes with these features ('a', 'a&b', 'a|b').
    constraint: str = ""
    gpus_per_task: int | None = None
    # Passed through to the agents (see Step.launch).
    launch: dict[str, Any] | None = None


def layout(job: Job, request: StepRequest, features: Mapping[str, frozenset[str]] | None = None,
           ) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The step's nodes (in allocation order) and tasks per node (block distribution: the first nodes
    take one more when the tasks do not divide evenly). `features`: each node's, for --constraint."""
    allocated = job.node_names
    # A node the allocation lacks may be excluded (it is not used either way: srun -x NODE outside a job sends
    # the job's -x to its step too), not required: as Slurm's srun.
    unknown = [n for n in request.nodelist if n not in allocated]
    if unknown:
        raise StepRefused(f"Requested node configuration is not available: {', '.join(unknown)} "
                          f"not in the allocation of job {job.id} ({', '.join(allocated)})")
    if set(request.nodelist) & set(request.exclude):
        raise StepRefused("Requested node configuration is not available: a node is both required and excluded")
    candidates = [n for n in allocated if n not in request.exclude]
    if request.constraint:
        candidates = _meeting(job, request, candidates, features or {})
    count = request.nodes
    if count is None:
        count = len(request.nodelist) if request.nodelist else len(candidates)
        if request.ntasks is not None and not request.nodelist:
            count = min(count, request.ntasks)
    if count < 1 or count > len(candidates) or count < len(request.nodelist):
        raise StepRefused(f"Requested node configuration is not available: {count} node(s) asked, "
                          f"{len(candidates)} usable in the allocation of job {job.id}")
    chosen = [n for n in allocated if n in request.nodelist]
    chosen += [n for n in candidates if n not in chosen][:count - len(chosen)]
    nodes = tuple(n for n in allocated if n in chosen)
    per_node = request.ntasks_per_node
    ntasks = request.ntasks if request.ntasks is not None else count * (per_node or 1)
    if ntasks < count:
        raise StepRefused(f"Requested node configuration is not available: {ntasks} task(s) on {count} node(s)")
    base, extra = divmod(ntasks, count)
    tasks = tuple(base + (1 if i < extra else 0) for i in range(count))
    if per_node is not None and tasks[0] > per_node:
        raise StepRefused(f"Requested node configuration is not available: {ntasks} tasks do not fit "
                          f"{count} node(s) x {per_node} task(s) per node")
    if request.gpus_per_task:
        for node, n_tasks in zip(nodes, tasks, strict=True):
            held = len(next(s for s in job.slices if s.node == node).gpus)
            if n_tasks * request.gpus_per_task > held:
                raise StepRefused(f"Requested node configuration is not available: {n_tasks} task(s) x "
                                  f"{request.gpus_per_task} GPU(s) on {node}, where job {job.id} holds {held}")
    return nodes, tasks


def _meeting(job: Job, request: StepRequest, candidates: list[str],
             features: Mapping[str, frozenset[str]]) -> list[str]:
    """The candidates whose features meet the step's --constraint. None of them: refused at once (Slurm
    22.05 leaves such a step pending, but an allocation's nodes never gain features, so it could only
    wait forever), in Slurm's words for a step that does not fit its allocation, naming what each has."""
    try:
        wanted = parse_constraint(request.constraint)
    except NodeChoiceError as exc:
        raise StepRefused(str(exc)) from None
    meeting = [n for n in candidates if wanted.met_by(features.get(n, frozenset()))]
    if not meeting:
        offered = "; ".join(f"{n}: {', '.join(sorted(features.get(n, ()))) or 'none'}" for n in candidates)
        raise StepRefused(f"Requested node configuration is not available: no node of job {job.id}'s allocation "
                          f"meets --constraint={request.constraint} (features {offered or 'of no usable node'})")
    if request.nodelist and not set(request.nodelist) <= set(meeting):
        missing = ", ".join(n for n in request.nodelist if n not in meeting)
        raise StepRefused(f"Requested node configuration is not available: {missing} in --nodelist does not "
                          f"meet --constraint={request.constraint}")
    return meeting


def start_step(job: Job, request: StepRequest, now: float,
               features: Mapping[str, frozenset[str]] | None = None) -> tuple[Step, list[Command]]:
    """Add a step to a running job (or refuse it, changing nothing): the step and its launches.
    `features`: the nodes' features (from the engine's nodes), for the step's --constraint."""
    if job.state is not JobState.RUNNING:
        raise JobNotRunning(f"Job {job.id} is {job.state.value}: steps start only in a running job")
    nodes, tasks = layout(job, request, features)
    launch = dict(request.launch or {})
    launch["gpus_per_task"] = request.gpus_per_task
    step = Step(step_id=len(job.steps), name=request.name, nodes=nodes, tasks_per_node=tasks,
                start_time=now, launch=launch)
    job.steps.append(step)
    return step, [LaunchStep(job.id, step.step_id, node) for node in nodes]


def live_step_nodes(job: Job) -> set[str]:
    """Nodes where a step of the job may still have tasks."""
    return {n for st in job.steps if st.live for n in st.nodes if n not in st.reported}


def step_finished(job: Job, node: str, step_id: int, tasks: Iterable[tuple[int, int, int]], error: str | None,
                  now: float, oom_killed: bool = False, usage: Mapping[str, Any] | None = None,
                  failure: InfrastructureFailure | None = None) -> list[Command] | None:
    """Fold one node's report on a step in: the kills it calls for, or None for a report that changes
    nothing (a repeat, or about a step or node the job does not have). `failure`: corral's own machinery
    failed under the step's tasks there: the step ends NODE_FAIL with it as its error."""
    if step_id >= len(job.steps):
        return None
    step = job.steps[step_id]
    if not step.live or node not in step.nodes or node in step.reported:
        return None  # a repeat of a report already folded in
    if failure is not None:
        error, step.infrastructure_failed = failure.describe(node), True
        step.reported[node] = NodeRun(started=True, finished=True, signal=signal.SIGKILL,
                                      usage=dict(usage) if usage is not None else None)
    else:
        step.reported[node] = node_result(tasks, error, oom_killed, usage)
    if error:
        step.error = error[:200]
    commands: list[Command] = []
    if len(step.reported) == len(step.nodes):
        ended_by = JobState.NODE_FAIL if step.infrastructure_failed else None
        _end_step(step, now, killed_by=job.final_state if job.state is JobState.COMPLETING else ended_by)
    elif error and job.state is JobState.RUNNING:
        # One node could not start its part: the step's other tasks end too (srun kills a failed step).
        commands = [Kill(job.id, n, signal.SIGKILL, 0.0, target="steps", step_id=step.step_id,
                         reason=kill_reasons.CANCELLED) for n in step.nodes if n not in step.reported]
    return commands


def node_lost(job: Job, node: str, now: float) -> None:
    for step in job.steps:
        if step.live and node in step.nodes and node not in step.reported:
            step.reported[node] = NodeRun(started=True, finished=True, signal=signal.SIGKILL)
            if len(step.reported) == len(step.nodes):
                _end_step(step, now, killed_by=JobState.NODE_FAIL)


def close_steps(job: Job, now: float) -> None:
    """The job is over: steps nobody reported on end with it."""
    for step in job.steps:
        if step.live:
            _end_step(step, now, killed_by=job.final_state or job.state)


def _end_step(step: Step, now: float, killed_by: JobState | None) -> None:
    runs = list(step.reported.values())
    step.exit_code = max((r.exit_code for r in runs), default=0)
    step.signal = next((r.signal for r in runs if r.signal), 0)
    if len(runs) == len(step.nodes) and not step.signal:
        killed_by = None  # every task had exited by itself before the job's end reached it
    if killed_by is not None:  # the job's end (a requeue included) took the step with it
        step.state = _ENDED_BY_JOB.get(killed_by, "CANCELLED")
    elif any(r.oom_killed for r in runs):
        step.state = "OUT_OF_MEMORY"
        step.exit_code, step.signal = OOM_EXIT
    elif step.error or step.exit_code or step.signal:
        step.state = "FAILED"
    else:
        step.state = "COMPLETED"
    step.end_time = now
    step.launch = {}


def step_kills(job: Job, signum: int, grace_s: float, step_id: int | None = None,
               reason: str | None = None) -> list[Command]:
    return [Kill(job.id, n, signum, grace_s, target="steps", step_id=step_id, reason=reason)
            for n in sorted(live_step_nodes(job))]
