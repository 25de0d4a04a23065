"""What a starting agent finds in its spool of an earlier agent's tasks, and which of them it can adopt
(decision 0015).

A job's (or step's) tasks here are adopted together, when the spool holds its launch message and a record
of every local task, each with a leader (task_leader.c) that either still runs or recorded the task's
end. Everything else is left to the sweep (killed): records without a launch or without a leader (an
older agent's), and a job or step one of whose tasks' leaders died without recording its end (that work
truly died, and its job is reported lost). A lost step is also reported finished, with its error; a job
whose leader died so is reported finished as an infrastructure failure (the agent names the leader).

A job whose launch is saved but not every local task recorded was being started when its agent stopped:
between saving the launch and recording each task. A task that had started then was killed unconfirmed by
its leader, perhaps after it ran a little (wrote its first line). Left unreported, the controller sends the
same launch again and the run starts twice; so it is reported finished as an infrastructure failure, a
launch that failed, and the controller requeues the job as a new run (or ends it NODE_FAIL), with why.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import ValidationError

from corral.agent.leaders import exit_file, read_exit, same_process
from corral.agent.task_spool import TaskRecord, TaskSpool, boot_id
from corral.protocol import LaunchJob, LaunchStep

log = logging.getLogger(__name__)

LEADER_DIED = "the leader of task"  # how the reason starts when a leader died without recording its task's end
NOT_ALL_RECORDED = "not all of its tasks here were recorded"
INTERRUPTED_START = ("its agent stopped while starting its tasks here (before it recorded every one): a task that "
                     "had started was killed unconfirmed, so this run is not started again")


@dataclass(slots=True)
class Adoptable:
    launch: LaunchJob | LaunchStep
    records: list[TaskRecord]
    launch_json: str  # as saved


@dataclass(slots=True)
class Findings:
    adoptable: list[Adoptable] = field(default_factory=list)
    to_kill: list[TaskRecord] = field(default_factory=list)  # records that cannot be adopted
    lost: list[tuple[int, int | None, str]] = field(default_factory=list)  # (job, step, why) of work that died
    lost_steps: list[LaunchStep] = field(default_factory=list)  # their launches, to report them finished
    # Jobs whose task leaders were killed while no agent watched (an infrastructure failure), with why.
    killed_jobs: list[tuple[LaunchJob, str]] = field(default_factory=list)
    # Jobs whose start its agent did not finish (saved launch, not every task recorded): a failed launch.
    interrupted_jobs: list[LaunchJob] = field(default_factory=list)


def find_adoptable(spool: TaskSpool) -> Findings:
    found = Findings()
    groups: dict[tuple[int, int | None], list[TaskRecord]] = {}
    for record in spool.records():
        groups.setdefault((record.job_id, record.step_id), []).append(record)
    launches = spool.saved_launches()
    for key in sorted(set(launches) - set(groups), key=str):
        # Its records go only after its launch (LocalTasks.release), so none were written: its agent stopped
        # while starting it. A step's srun lost its stream with that agent; a job's launch failed.
        launch = _parse(key, launches[key])
        if isinstance(launch, LaunchJob):
            found.lost.append((key[0], None, INTERRUPTED_START))
            found.interrupted_jobs.append(launch)
        spool.forget_launch(*key)
    for key, records in sorted(groups.items(), key=str):
        launch = _parse(key, launches.get(key))
        why = _why_not(launch, records, spool)
        if why is None:
            assert launch is not None
            found.adoptable.append(Adoptable(launch, sorted(records, key=lambda r: r.rank), launches[key]))
            continue
        found.to_kill.extend(records)
        found.lost.append((key[0], key[1], why))
        if isinstance(launch, LaunchStep):
            found.lost_steps.append(launch)
        elif isinstance(launch, LaunchJob) and why.startswith(LEADER_DIED):
            found.killed_jobs.append((launch, why))
        elif isinstance(launch, LaunchJob) and why == NOT_ALL_RECORDED:
            found.interrupted_jobs.append(launch)
        spool.forget_launch(*key)
    return found


def _parse(key: tuple[int, int | None], text: str | None) -> LaunchJob | LaunchStep | None:
    if text is None:
        return None
    try:
        return (LaunchJob if key[1] is None else LaunchStep).model_validate_json(text)
    except ValidationError as exc:
        log.warning("unreadable launch record of %s: %s", key, exc)
        return None


def _why_not(launch: LaunchJob | LaunchStep | None, records: list[TaskRecord], spool: TaskSpool) -> str | None:
    """Why these tasks cannot be adopted, or None."""
    if launch is None:
        return "its launch was not recorded"
    if any(r.boot_id != boot_id() for r in records):
        return "the node rebooted"
    if any(not r.leader for r in records):
        return "an agent without task leaders started it"
    if sorted(r.rank for r in records) != sorted(t.rank for t in launch.tasks):
        return NOT_ALL_RECORDED
    for record in records:
        if not same_process(record.leader, record.leader_started) and \
                read_exit(exit_file(spool.directory, record.leader)) is None:
            return f"{LEADER_DIED} {record.rank} died without recording its end"
    return None
