"""Pure rendering: table rows and readable fields from JobOut / NodeOut dicts (no I/O, no rich).

Array tasks are named as Slurm names them, `ARRAYJOB_TASK` (e.g. 12_3).

Times are shown in local time in Slurm's ISO form (2024-05-01T14:05:03); `now` is passed in so
output is reproducible."""
from __future__ import annotations

import os
import time
from _collections_abc import Callable, Mapping, Sequence
from itertools import repeat

from corral.cli.efficiency import efficiency_fields
from corral.durations import format_duration, format_duration_short
from corral.gpu_models import describe as describe_gpu
from corral.slurm.common import jobids
from corral.slurm.common.table import JobColumns

QUEUE_HEADERS = ("JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "NODES", "GPUS", "NODELIST(REASON)")
QUEUE_RIGHT = frozenset({0, 5, 6, 7})  # numbers right-aligned, as squeue does
QUEUE_STATE_COLUMN = 4
# `corral queue --long`: who pays and under which rules, and the detail behind a pending reason.
QUEUE_LONG_HEADERS = ("JOBID", "PARTITION", "NAME", "USER", "ACCOUNT", "QOS", "QUEUE", "STATE", "TIME", "NODES",
                      "GPUS", "NODELIST(REASON)", "DETAIL")
QUEUE_LONG_RIGHT = frozenset({0, 8, 9, 10})
QUEUE_LONG_STATE_COLUMN = 7
# The fields the queue's rows read (queue_rows, nodelist_or_reason, job_id_text, and the combining of an array's
# pending tasks), asked of the controller as `fields=`: a quarter of a job line's (tests/cli/test_render.py).
QUEUE_FIELDS = ("id", "array_job_id", "array_task_id", "array_task_spec", "array_throttle", "partition", "name",
                "user", "state", "reason", "elapsed_s", "num_nodes", "total_gpus", "nodelist", "gpu_idle_flagged",
                "estimated_start", "estimated_start_source", "estimated_start_window")
QUEUE_LONG_FIELDS = (*QUEUE_FIELDS, "account", "qos", "queue", "reason_detail")
NODE_HEADERS = ("NODE", "STATE", "PARTITIONS", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "GPU MODEL", "FEATURES",
                "REASON", "ISOLATION")
NODE_RIGHT = frozenset({3, 4, 5})
ACCT_HEADERS = ("JobID", "Name", "State", "Start", "End", "Elapsed", "Nodes", "GPUs", "GPU-seconds", "ExitCode")
ACCT_RIGHT = frozenset({0, 5, 6, 7, 8, 9})
UNKNOWN_TIME = "Unknown"  # what Slurm prints for a time not reached yet


def format_timestamp(epoch: float | None) -> str:
    if epoch is None:
        return UNKNOWN_TIME
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def format_clock(epoch: float, now: float) -> str:
    """The time of day alone when it is today, else the full timestamp."""
    same_day = time.localtime(epoch)[:3] == time.localtime(now)[:3]
    return time.strftime("%H:%M:%S", time.localtime(epoch)) if same_day else format_timestamp(epoch)


def format_mib(mib: float) -> str:
    """Memory for people: 512M, 16G, 1.5T (1024-based, like Slurm's units)."""
    for unit, size in (("T", 1024 * 1024), ("G", 1024)):
        if mib >= size:
            value = mib / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{mib:.0f}M"


def exit_code_text(job: dict) -> str:
    return f"{job['exit_code']}:{job['exit_signal']}"


def job_id_text(job: Mapping) -> str:
    """`12_3` for task 3 of array job 12, `12_[4-9]` for a record standing for its pending tasks (as
    squeue.select.combine_pending_array_tasks makes them), else the job id."""
    return jobids.job_id(job)


def or_dash(text: object) -> str:
    return "-" if text is None or text == "" else str(text)


def nodelist_or_reason(job: Mapping, now: float) -> str:
    """squeue's NODELIST(REASON): the nodes once allocated (and `(GPUs idle)` for a running job the controller
    flagged so), else `(Reason)` and any estimated start (saying when it is a forecast rather than the start
    the scheduler has reserved)."""
    if job["nodelist"]:
        flagged = job.get("gpu_idle_flagged") and job["state"] == "RUNNING"
        return f"{job['nodelist']} (GPUs idle)" if flagged else job["nodelist"]
    text = f"({job['reason']})"
    if job.get("estimated_start") is not None:
        text += f" est. start {format_clock(job['estimated_start'], now)}{_forecast_mark(job)}"
        window = job.get("estimated_start_window")
        if window:  # users plan by its late end
            text += f" window {format_clock(window[0], now)}-{format_clock(window[1], now)}"
    return text


def _forecast_mark(job: Mapping) -> str:
    return " (forecast)" if job.get("estimated_start_source") == "forecast" else ""


def queue_rows(jobs: Sequence[Mapping], now: float) -> list[tuple[str, ...]]:
    return [
        (
            job_id_text(job), job["partition"], job["name"], job["user"], job["state"],
            format_duration_short(job["elapsed_s"]), str(job["num_nodes"]), str(job["total_gpus"]),
            nodelist_or_reason(job, now),
        )
        for job in jobs
    ]


def queue_long_rows(jobs: Sequence[Mapping], now: float) -> list[tuple[str, ...]]:
    """queue_rows plus ACCOUNT, QOS, QUEUE (after USER) and DETAIL (the reason's detail, last)."""
    return [
        (*short[:4], or_dash(job.get("account")), or_dash(job.get("qos")), or_dash(job.get("queue")), *short[4:],
         job.get("reason_detail") or "")
        for job, short in zip(jobs, queue_rows(jobs, now), strict=True)
    ]


def queue_columns(jobs: JobColumns, now: float, long: bool = False) -> list[list[str]] | None:
    """queue_rows (queue_long_rows with `long`) a column at a time from the controller's columns: a field shown
    as it is taken whole, every other cell computed once per distinct combination of what it reads
    (JobColumns.values), no record per job. None when a job belongs to an array (its id and the combining of
    its pending tasks need records)."""
    array_ids = jobs.column("array_job_id")
    if array_ids.count(None) != len(array_ids):
        return None
    jobs.group_by([name for _, reads in _QUEUE_CELLS for name in reads])
    short = [list(map(str, jobs.column("id"))), *map(jobs.column, _QUEUE_AS_SENT),
             *(jobs.values(_at(cell, now), reads) for cell, reads in _QUEUE_CELLS)]
    if not long:
        return short
    extra = [jobs.values(_dash_or(name), (name,)) for name in ("account", "qos", "queue")]
    detail = jobs.values(lambda job: job.get("reason_detail") or "", ("reason_detail",))
    return [*short[:4], *extra, *short[4:], detail]


def _at(cell: Callable[[Mapping, float], str], now: float) -> Callable[[Mapping], str]:
    return lambda job: cell(job, now)


def _dash_or(name: str) -> Callable[[Mapping], str]:
    return lambda job: or_dash(job.get(name))


# queue_rows' cells after JOBID: the fields shown as they are, then the others and the fields each reads.
_QUEUE_AS_SENT = ("partition", "name", "user", "state")
_QUEUE_CELLS: tuple[tuple[Callable[[Mapping, float], str], tuple[str, ...]], ...] = (
    (lambda job, now: format_duration_short(job["elapsed_s"]), ("elapsed_s",)),
    (lambda job, now: str(job["num_nodes"]), ("num_nodes",)),
    (lambda job, now: str(job["total_gpus"]), ("total_gpus",)),
    (nodelist_or_reason, ("nodelist", "gpu_idle_flagged", "state", "reason", "estimated_start",
                          "estimated_start_source", "estimated_start_window")),
)


def node_rows(nodes: Sequence[dict]) -> list[tuple[str, ...]]:
    return [
        (
            node["name"], node["state"], ",".join(node["partitions"]),
            f"{node['cpus_alloc']}/{node['cpus']}",
            f"{format_mib(node['mem_alloc_mib'])}/{format_mib(node['mem_mib'])}",
            f"{node['gpus_alloc']}/{len(node['gpus'])}", gpu_models(node), ",".join(node.get("features") or ()) or "-",
            node["drain_reason"],
            isolation(node),
        )
        for node in nodes
    ]


def isolation(node: dict) -> str:
    """How the node's agent confines jobs, in a few words: `as user, cgroup v2 tracking + v1 memory, cpuset,
    devices` (what its cgroups enforce, from which version), or `dev mode: as root, no cgroups` (an agent
    that cannot switch users runs every task as itself). --json has the details (where, what is missing)."""
    users = "as user" if node.get("run_as_user", True) else f"dev mode: as {node.get('agent_user') or '?'}"
    text = node.get("cgroups") or ""
    # The agent's line starts with what is enforced; older agents said only "cgroup v2 at <root>".
    cgroups = text.split(" (")[0].split(" at ")[0] if text.startswith("cgroup ") else "no cgroups"
    return f"{users}, {cgroups}"


def without_cgroups(nodes: Sequence[dict]) -> str:
    """Which nodes run jobs without cgroups, and why in the words of the first one's agent; "" if none."""
    bare = [node for node in nodes if isolation(node).endswith("no cgroups")]
    if not bare:
        return ""
    names = ", ".join(node["name"] for node in bare)
    why = bare[0].get("cgroups") or "its agent does not say why"
    return (f"{len(bare)} node{'s run' if len(bare) > 1 else ' runs'} jobs without cgroups ({names}); "
            f"{bare[0]['name']}: {why}")


def gpu_models(node: dict) -> str:
    """Distinct GPU models with counts, each as its Slurm type and full name, e.g.
    `4x h100 (NVIDIA H100 80GB HBM3)`; `-` for a node without GPUs."""
    counts: dict[str, int] = {}
    for gpu in node["gpus"]:
        counts[gpu["model"]] = counts.get(gpu["model"], 0) + 1
    return ", ".join(f"{n}x {describe_gpu(model)}" for model, n in counts.items()) or "-"


def acct_rows(jobs: Sequence[dict]) -> list[tuple[str, ...]]:
    return [
        (
            job_id_text(job), job["name"], job["state"], format_timestamp(job["start_time"]),
            format_timestamp(job["end_time"]), format_duration(job["elapsed_s"]), str(job["num_nodes"]),
            str(job["total_gpus"]), f"{job['gpu_seconds']:.0f}", exit_code_text(job),
        )
        for job in jobs
    ]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]],
                 right: frozenset[int] = frozenset()) -> list[str]:
    """Columns padded to their widest cell, two spaces apart; trailing blanks trimmed. Padded a column at a
    time (a 100,000-job queue spent 1 s padding cell by cell)."""
    columns = list(zip(headers, *rows, strict=False))
    padded = []
    for index, column in enumerate(columns):
        width = max(map(len, column))
        pad = str.rjust if index in right else str.ljust
        padded.append([pad(cell, width) for cell in column])
    return ["  ".join(cells).rstrip() for cells in zip(*padded, strict=True)] if padded else [""] * (1 + len(rows))


def format_columns(headers: Sequence[str], columns: Sequence[Sequence[str]],
                   right: frozenset[int] = frozenset()) -> list[str]:
    """format_table of a table given a column at a time: no row is built, each column padded by one map()."""
    padded = []
    for index, (header, column) in enumerate(zip(headers, columns, strict=True)):
        width = max(len(header), max(map(len, column), default=0))
        pad = str.rjust if index in right else str.ljust
        padded.append(list(map(pad, [header, *column], repeat(width))))
    return list(map(str.rstrip, map("  ".join, zip(*padded, strict=True))))


def empty_queue_text(all_jobs: bool, filtered: bool) -> str:
    """What an empty queue prints; without --all it says where finished jobs are."""
    if all_jobs:
        return "No jobs match." if filtered else "No jobs."
    match = " match" if filtered else ""
    return f"No pending or running jobs{match} (finished jobs: corral queue --all or corral acct)."


def cancelled_line(job: dict) -> str:
    """What a cancel did, from the job as the controller answered: ended, or being stopped."""
    name = job_id_text(job)
    if job["state"] == "COMPLETING":
        return f"Cancelling job {name}: its tasks are being stopped (COMPLETING), then it ends CANCELLED"
    return f"Cancelled job {name} ({job['state']})"


def job_fields(job: dict) -> list[tuple[str, str]]:
    """(label, text) pairs in scontrol's spirit: identity, state, times, shape, placement, files."""
    return [
        ("JobId", str(job["id"])),
        *_array_fields(job),
        ("JobName", job["name"]),
        ("User", job["user"]),
        ("Uid", str(job.get("uid", 0))),
        ("Account", or_none(job.get("account"))),
        ("QOS", or_none(job.get("qos"))),
        ("Queue", or_none(job.get("queue"))),
        ("Partition", job["partition"]),
        ("Priority", str(job["priority"])),
        ("State", job["state"]),
        ("Reason", job["reason"]),
        *_reason_detail_fields(job),
        ("Held", yes_no(job.get("held", False))),
        ("Dependency", or_none(job.get("dependency"))),
        ("Reservation", or_none(job.get("reservation"))),
        ("Requeue", yes_no(job.get("requeue", True))),
        ("ExpeditedRequeue", yes_no(job.get("expedited_requeue", False))),
        ("Batch", yes_no(job.get("batch", False))),
        ("OpenMode", job.get("open_mode", "append")),
        ("Comment", or_none(job.get("comment"))),
        ("WCKey", or_none(job.get("wckey"))),
        ("CancelledBy", or_none(None if job.get("cancelled_by_uid") is None else str(job["cancelled_by_uid"]))),
        ("Steps", ", ".join(str(st.get("step_id")) for st in job.get("steps", [])) or "(none)"),
        ("ExitCode", exit_code_text(job)),
        ("RestartCount", str(job["restart_count"])),
        *_time_fields(job),
        *_shape_fields(job),
        ("NodeList", job["nodelist"] or "(none)"),
        *_slice_fields(job),
        ("GpuSeconds", f"{job['gpu_seconds']:.0f}"),
        *efficiency_fields(job),
        ("WorkDir", job["workdir"]),
        ("SubmitHost", or_none(job.get("submit_host"))),
        *_output_fields(job),
    ]


def _output_fields(job: dict) -> list[tuple[str, str]]:
    """The files the job's own tasks write; an allocation (`corral run`, salloc) has none, and scontrol
    shows no StdOut for it either."""
    if job.get("allocation"):
        return [("Interactive", "yes: no output file; its steps' output went to the srun that ran them")]
    # No separate error file: stderr goes with stdout.
    return [("StdOut", output_file(job, job["output"])), ("StdErr", output_file(job, job["error"] or job["output"]))]


def output_file(job: dict, pattern: str) -> str:
    """The file an output pattern (%j, %x, %N, %t, ...) names, as the agent opens it for the first task on
    the job's first node (Slurm's scontrol also shows the first task's); %N stays until there is a node."""
    from corral.filename_pattern import expand_pattern  # brings `re`: only `corral show` needs it

    node = job["slices"][0]["node"] if job.get("slices") else "%N"
    name = expand_pattern(pattern, job_id=job["id"], job_name=job["name"], user=job["user"], node_name=node,
                          node_index=0, task_rank=0, array_job_id=job.get("array_job_id"),
                          array_task_id=job.get("array_task_id"))
    return os.path.join(job["workdir"], name)


def or_none(text: str | None) -> str:
    return text or "(none)"


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _array_fields(job: dict) -> list[tuple[str, str]]:
    """Slurm's ArrayJobId / ArrayTaskId / ArrayTaskThrottle, for array tasks only."""
    if job.get("array_job_id") is None:
        return []
    # A record standing for an array's pending tasks (lists asked with combine_arrays) names them all.
    task = job.get("array_task_spec") or or_none_number(job.get("array_task_id"))
    fields = [("ArrayJobId", str(job["array_job_id"])), ("ArrayTaskId", task)]
    if job.get("array_throttle") is not None:
        fields.append(("ArrayTaskThrottle", str(job["array_throttle"])))
    return fields


def or_none_number(number: int | None) -> str:
    return "(none)" if number is None else str(number)


def _reason_detail_fields(job: dict) -> list[tuple[str, str]]:
    fields = [("ReasonDetail", job["reason_detail"])] if job.get("reason_detail") else []
    if job.get("position") is not None:
        fields.append(("Position", f"{job['position']} in the scheduling order"))
    return fields


def _time_fields(job: dict) -> list[tuple[str, str]]:
    fields = [
        ("SubmitTime", format_timestamp(job["submit_time"])),
        ("StartTime", format_timestamp(job["start_time"])),
        ("EndTime", format_timestamp(job["end_time"])),
    ]
    if job.get("estimated_start") is not None:
        fields.append(("EstimatedStart", format_timestamp(job["estimated_start"]) + _forecast_mark(job)))
    if job.get("estimated_start_window"):
        earliest, latest = job["estimated_start_window"]
        fields.append(("EstimatedStartWindow", f"{format_timestamp(earliest)} to {format_timestamp(latest)}"))
    fields += [("TimeLimit", format_duration(job["time_limit_s"])), ("RunTime", format_duration(job["elapsed_s"]))]
    return fields


def _shape_fields(job: dict) -> list[tuple[str, str]]:
    share = [("GpuShare", job["gpu_share"])] if job.get("gpu_share") else []
    return [
        ("NumNodes", str(job["num_nodes"])),
        ("NumTasks", str(job["num_tasks"])),
        ("TasksPerNode", str(job["tasks_per_node"])),
        ("CpusPerTask", str(job["cpus_per_task"])),
        ("GpusPerNode", str(job["gpus_per_node"])),
        *share,
        ("TotalGpus", str(job["total_gpus"])),
        ("MemPerNode", format_mib(job["mem_per_node_mib"])),
        *_chosen_fields(job),
        *_container_fields(job),
    ]


def _container_fields(job: dict) -> list[tuple[str, str]]:
    """Its container (pyxis's --container-* options), where it has one."""
    if not job.get("container_image"):
        return []
    given = [("ContainerImage", job.get("container_image")), ("ContainerMounts", job.get("container_mounts")),
             ("ContainerWorkdir", job.get("container_workdir")), ("ContainerName", job.get("container_name")),
             ("ContainerEnv", job.get("container_env"))]
    flags = [("ContainerMountHome", "no")] if job.get("container_mount_home") is False else []
    flags += [("ContainerRemapRoot", "yes")] if job.get("container_remap_root") else []
    return [(label, str(value)) for label, value in given if value] + flags


def _chosen_fields(job: dict) -> list[tuple[str, str]]:
    """The nodes the job chose (-w, -x, --constraint) and --exclusive, where it chose any."""
    chosen = [("ReqNodeList", job.get("req_nodelist")), ("ExcNodeList", job.get("exc_nodelist")),
              ("Features", job.get("constraint"))]
    exclusive = [("Exclusive", "yes")] if job.get("exclusive") else []
    return [(label, str(value)) for label, value in chosen if value] + exclusive


def _slice_fields(job: dict) -> list[tuple[str, str]]:
    """One `Alloc[node]` line per node: its GPU indices, CPUs and memory."""
    return [
        (f"Alloc[{s['node']}]",
         f"gpus={','.join(str(g) for g in s['gpus']) or '-'} cpus={s['cpus']} mem={format_mib(s['mem_mib'])}")
        for s in job["slices"]
    ]


def format_fields(fields: list[tuple[str, str]]) -> list[str]:
    width = max((len(label) for label, _ in fields), default=0)
    return [f"{label.ljust(width)} : {text}" for label, text in fields]


def history_lines(job: dict) -> list[str]:
    """The job's history (preemptions, requeues, warning signals), one readable line per event, oldest
    first; empty when nothing happened."""
    events = job.get("history") or []
    if not events:
        return []
    return ["History:", *(f"  {format_timestamp(_event_time(e))}  {describe_event(e)}" for e in events)]


_EVENT_TIME_KEYS = ("t", "time")
_EVENT_KIND_KEYS = ("event", "kind")


def _event_time(event: dict) -> float | None:
    return next((event[k] for k in _EVENT_TIME_KEYS if isinstance(event.get(k), int | float)), None)


def describe_event(event: dict) -> str:
    """`preempted by job 7 (reclaim)`, `requeued (preempted)`, `signal USR1 sent`; other events and keys
    are shown as `event key=value ...`, so nothing the controller records is hidden."""
    kind = next((str(event[k]) for k in _EVENT_KIND_KEYS if k in event), "event")
    rest = {k: v for k, v in event.items() if k not in _EVENT_TIME_KEYS + _EVENT_KIND_KEYS}
    text = _EVENT_PHRASES.get(kind, _plain_event)(kind, rest)
    return " ".join([text, *(f"{k}={_detail_text(k, v)}" for k, v in rest.items())])


_TIME_KEY_ENDINGS = ("_start", "_end", "_time", "_at")


def _detail_text(key: str, value: object) -> str:
    """An event's detail as a person reads it: times (run_start, run_end, begin_time, ...: epoch seconds as
    the engine stores them) in local time as Slurm prints times, everything else as it is."""
    is_time = key.endswith(_TIME_KEY_ENDINGS) or key in ("start", "end", "until")
    if is_time and isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return format_timestamp(value)
    return str(value)


def _plain_event(kind: str, rest: dict) -> str:
    return kind


def _preempted(kind: str, rest: dict) -> str:
    text = "preempted"
    if rest.get("by") is not None:
        text += f" by job {rest.pop('by')}"
    return text + _in_parens(rest, "cause", "reason")


def _requeued(kind: str, rest: dict) -> str:
    return "requeued" + _in_parens(rest, "cause", "reason")


def _cluster_stopped(kind: str, rest: dict) -> str:
    outcome = rest.pop("outcome", None)
    if outcome is None:
        return "cluster stopped"
    return "cluster stopped: tasks killed, job " + ("requeued" if outcome == "requeued" else f"ended {outcome}")


def _infrastructure_failed(kind: str, rest: dict) -> str:
    """`infrastructure failure on node3: task leader ... killed ...; tasks killed, job requeued`; a step's
    names the step."""
    node, outcome, step = rest.pop("node", "?"), rest.pop("outcome", None), rest.pop("step", None)
    rest.pop("kind", None)  # the reason says it in words
    where = node if step is None else f"{node} (step {step})"
    text = f"infrastructure failure on {where}: {rest.pop('reason', '?')}"
    if outcome is None:
        return text
    return text + "; tasks killed, job " + ("requeued" if outcome == "requeued" else f"ended {outcome}")


def _node_failed(kind: str, rest: dict) -> str:
    node, outcome = rest.pop("node", "?"), rest.pop("outcome", None)
    text = f"node {node} failed"
    if outcome is None:
        return text
    return text + ": tasks killed, job " + ("requeued" if outcome == "requeued" else f"ended {outcome}")


def _nodes_held(kind: str, rest: dict) -> str:
    nodes, until = rest.pop("nodes", []), rest.pop("until", None)
    text = f"nodes {','.join(nodes)} held for it (expedited requeue)"
    return text + (f" until {format_timestamp(until)}" if isinstance(until, int | float) else "")


def _signal(kind: str, rest: dict) -> str:
    name = rest.pop("signal", None) or rest.pop("name", None)
    return (f"signal {name} sent" if name is not None else "signal sent") + _in_parens(rest, "cause", "reason")


def _in_parens(rest: dict, *keys: str) -> str:
    """` (why)` from the first of `keys` present (removed from `rest`), else ""."""
    for key in keys:
        if rest.get(key):
            return f" ({rest.pop(key)})"
    return ""


_EVENT_PHRASES = {"preempted": _preempted, "requeued": _requeued, "signal": _signal, "signalled": _signal,
                  "cluster-stopped": _cluster_stopped, "node-failed": _node_failed, "nodes-held": _nodes_held,
                  "infrastructure-failed": _infrastructure_failed}
