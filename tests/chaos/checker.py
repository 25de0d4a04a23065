"""The history checker of the fault suite: what the jobs themselves wrote, against what corral recorded.

Every job of the chaos workload (`workload.py`) writes, from each task, one marker file per incarnation:
a `start` line (time, node, pid, devices), a `beat` line every few tenths of a second while it runs, and an
`end` line when it finishes its work. Markers are written by the job, not by corral, so they show what
really ran, whatever corral's records say. The checker verifies, over a whole run:

- lost:       every submission the client saw accepted exists in corral's records and ends in a final state,
              and one that may be requeued does not end NODE_FAIL (a failed node requeues it, as Slurm);
- twice:      no two incarnations of one job overlap in time, and no run starts one of its tasks twice
              (work done again in a later run, after a node failure, is counted apart: `redone`);
- device:     no GPU (node, index) is used by two jobs at once;
- accounting: a COMPLETED job's record names the node its last incarnation ran on, and its elapsed time
              covers that incarnation's run (within the slack between a launch and the task's first line).

Time intervals come from one clock (all tasks run on this machine), a task's interval being its start line
to its last line: a task killed without warning is known to have lived at least that long, and, since it
beats every BEAT_S, at most BEAT_S more. Overlaps are therefore judged on what the markers prove, never on
guesses, and reported with the evidence.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                          "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"})
# A record's elapsed time counts from the controller's launch decision; the task's first line comes after
# the agent got the launch and forked: this much may separate them either way.
ACCOUNTING_SLACK_S = 3.0


@dataclasses.dataclass(frozen=True)
class Incarnation:
    """One task of one run of a job, as its marker file tells."""

    job_id: int
    node: str
    rank: int  # SLURM_NODEID: which of the run's nodes this task is
    pid: int
    restart_count: int
    devices: tuple[int, ...]
    start: float
    last_seen: float
    finished: bool  # wrote its `end` line: its work is done

    @property
    def name(self) -> str:
        return f"job {self.job_id} run {self.restart_count} pid {self.pid} on {self.node}"


@dataclasses.dataclass(frozen=True)
class Violation:
    kind: str  # lost | not_final | not_requeued | twice | device | accounting (run.py adds its own)
    job_id: int
    detail: str


def parse_marker(path: Path) -> Incarnation | None:
    """An incarnation from its marker file; None for a file cut off before its start line was whole."""
    lines = path.read_text().splitlines()
    if not lines or not lines[0].startswith("start ") or len(lines[0].split()) != 8:
        return None
    _, job, restart, node, rank, pid, devices, start = lines[0].split()
    times = [float(start)]
    finished = False
    for line in lines[1:]:
        words = line.split()
        if len(words) == 2 and words[0] in ("beat", "end"):
            try:
                times.append(float(words[1]))
            except ValueError:
                continue  # a line cut off by a kill
            finished = finished or words[0] == "end"
    return Incarnation(int(job), node, int(rank), int(pid), int(restart),
                       tuple(int(d) for d in devices.split(",") if d and d != "-"), float(start),
                       max(times), finished)


def read_markers(directory: Path) -> list[Incarnation]:
    found = (parse_marker(path) for path in sorted(directory.glob("*.marker")))
    return [incarnation for incarnation in found if incarnation is not None]


def check(accepted: Iterable[int], records: Mapping[int, Mapping],
          incarnations: Iterable[Incarnation]) -> list[Violation]:
    """Every violation of the run. `accepted`: the job ids the client was told were accepted; `records`:
    job id -> corral's record (sacct's view: state, nodes, elapsed_s); `incarnations`: the markers."""
    runs = defaultdict(list)
    for incarnation in incarnations:
        runs[incarnation.job_id].append(incarnation)
    violations = [*_lost_or_unfinished(accepted, records)]
    for job_id, mine in runs.items():
        violations += _twice(job_id, mine)
        record = records.get(job_id)
        if record is not None and record.get("state") == "COMPLETED":
            violations += _accounting(job_id, record, mine)
    violations += _shared_devices(runs.values())
    return violations


def _lost_or_unfinished(accepted: Iterable[int], records: Mapping[int, Mapping]) -> Iterable[Violation]:
    for job_id in sorted(set(accepted)):
        record = records.get(job_id)
        if record is None:
            yield Violation("lost", job_id, "accepted, but corral has no record of it")
        elif record.get("state") not in FINAL_STATES:
            yield Violation("not_final", job_id, f"still {record.get('state')} after the run drained")
        elif record.get("state") == "NODE_FAIL" and record.get("requeue", True):
            yield Violation("not_requeued", job_id, "may be requeued, but ended NODE_FAIL")


def _twice(job_id: int, mine: list[Incarnation]) -> Iterable[Violation]:
    # Tasks of one run on different nodes (a gang) overlap by design: compare runs, each run's interval
    # being the union of its tasks'.
    by_run: dict[int, list[Incarnation]] = defaultdict(list)
    for incarnation in mine:
        by_run[incarnation.restart_count].append(incarnation)
    spans = sorted((min(i.start for i in tasks), max(i.last_seen for i in tasks), run)
                   for run, tasks in by_run.items())
    for (_, end_a, run_a), (start_b, _, run_b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            yield Violation("twice", job_id, f"run {run_b} started at {start_b:.3f} while run {run_a} "
                                             f"was still alive at {end_a:.3f}")
    for run, tasks in by_run.items():
        ranks = [i.rank for i in tasks]
        if len(ranks) != len(set(ranks)):
            yield Violation("twice", job_id, f"run {run} started one of its nodes' tasks twice: "
                                             f"{', '.join(i.name for i in tasks)}")

def redone(incarnations: Iterable[Incarnation]) -> dict[int, list[int]]:
    """Jobs whose work finished in more than one run: job id -> those runs. Not a violation: a job whose
    node failed is requeued (as Slurm does), and work that finished while its node could not say so is
    done again, one run after the other; the report counts them."""
    finished: dict[int, set[int]] = defaultdict(set)
    for incarnation in incarnations:
        if incarnation.finished:
            finished[incarnation.job_id].add(incarnation.restart_count)
    return {job: sorted(runs) for job, runs in sorted(finished.items()) if len(runs) > 1}


def _accounting(job_id: int, record: Mapping, mine: list[Incarnation]) -> Iterable[Violation]:
    last_run = max(i.restart_count for i in mine)
    last = [i for i in mine if i.restart_count == last_run]
    if not all(i.finished for i in last):
        yield Violation("accounting", job_id, f"COMPLETED, but run {last_run} never finished its work")
        return
    recorded_nodes = set(record.get("nodes") or ())
    ran_on = {i.node for i in last}
    if recorded_nodes != ran_on:
        yield Violation("accounting", job_id, f"recorded on {sorted(recorded_nodes)}, ran on {sorted(ran_on)}")
    ran_s = max(i.last_seen for i in last) - min(i.start for i in last)
    elapsed = float(record.get("elapsed_s") or 0.0)
    if elapsed + ACCOUNTING_SLACK_S < ran_s:
        yield Violation("accounting", job_id, f"recorded elapsed {elapsed:.1f} s, but it ran {ran_s:.1f} s")


def _shared_devices(runs: Iterable[list[Incarnation]]) -> Iterable[Violation]:
    intervals: dict[tuple[str, int], list[Incarnation]] = defaultdict(list)
    for mine in runs:
        for incarnation in mine:
            for device in incarnation.devices:
                intervals[(incarnation.node, device)].append(incarnation)
    for (node, device), users in sorted(intervals.items()):
        users.sort(key=lambda i: i.start)
        alive: Incarnation | None = None  # the user seen so far that lives longest
        for incarnation in users:
            if alive is not None and incarnation.start < alive.last_seen and incarnation.job_id != alive.job_id:
                yield Violation("device", incarnation.job_id,
                                f"GPU {device} of {node}: {incarnation.name} started at {incarnation.start:.3f} "
                                f"while {alive.name} was alive at {alive.last_seen:.3f}")
            if alive is None or incarnation.last_seen > alive.last_seen:
                alive = incarnation
