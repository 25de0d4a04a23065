"""sacct's fields: canonical names, default widths and kinds (sacct.c fields[], measured on Slurm
22.05), and how each reads a job row or a step row of a corral record.

A negative width left-justifies. Kinds decide overflow: `str` values are cut to width-1 plus `+`,
`date` values are cut without a mark, `uint` and `secs` values overflow the column. A value of None
prints blank. The sampled fields (MaxRSS, AveCPU, TRESUsageInMax, ...: slurm/common/usage.py) come
from the agents' samples. Fields corral has no data for (energy, disk I/O, pages, ...) print blank, as they do in
Slurm without job accounting gathering."""
from __future__ import annotations

import math
from _collections_abc import Callable, Mapping

from corral import hostlist
from corral.slurm.common import jobids, records, states, timefmt, tres, usage
from corral.slurm.common.record import Record

_WIDTHS = (
    "Account:10 AdminComment:15 AllocCPUS:10 AllocNodes:10 AllocTRES:10 AssocID:7 AveCPU:10 AveCPUFreq:10 "
    "AveDiskRead:14 AveDiskWrite:14 AvePages:10 AveRSS:10 AveVMSize:10 BlockID:16 Cluster:10 Comment:14 "
    "Constraints:19 ConsumedEnergy:14 ConsumedEnergyRaw:17 Container:19 CPUTime:10 CPUTimeRAW:10 DBIndex:-10 "
    "DerivedExitCode:15 Elapsed:10 ElapsedRaw:10 Eligible:19 End:19 ExitCode:8 Flags:19 GID:6 Group:9 "
    "JobID:-12 JobIDRaw:-12 JobName:10 Layout:9 MaxDiskRead:12 MaxDiskReadNode:15 MaxDiskReadTask:15 "
    "MaxDiskWrite:12 MaxDiskWriteNode:16 MaxDiskWriteTask:16 MaxPages:8 MaxPagesNode:12 MaxPagesTask:14 "
    "MaxRSS:10 MaxRSSNode:10 MaxRSSTask:10 MaxVMSize:10 MaxVMSizeNode:14 MaxVMSizeTask:14 McsLabel:12 "
    "MinCPU:10 MinCPUNode:10 MinCPUTask:10 NCPUS:10 NNodes:8 NodeList:15 NTasks:8 Partition:10 Priority:10 "
    "QOS:10 QOSRAW:6 Reason:22 ReqCPUFreq:10 ReqCPUFreqGov:13 ReqCPUFreqMax:13 ReqCPUFreqMin:13 ReqCPUS:8 "
    "ReqMem:10 ReqNodes:8 ReqTRES:10 Reservation:20 ReservationId:8 Reserved:10 ResvCPU:10 ResvCPURAW:10 "
    "Start:19 State:10 Submit:19 SubmitLine:20 Suspended:10 SystemComment:15 SystemCPU:10 Timelimit:10 "
    "TimelimitRaw:10 TotalCPU:10 TRESUsageInAve:14 TRESUsageInMax:14 TRESUsageInMaxNode:18 "
    "TRESUsageInMaxTask:18 TRESUsageInMin:14 TRESUsageInMinNode:18 TRESUsageInMinTask:18 TRESUsageInTot:14 "
    "TRESUsageOutAve:15 TRESUsageOutMax:15 TRESUsageOutMaxNode:19 TRESUsageOutMaxTask:19 TRESUsageOutMin:15 "
    "TRESUsageOutMinNode:19 TRESUsageOutMinTask:19 TRESUsageOutTot:15 UID:6 User:9 UserCPU:10 WCKey:10 "
    "WCKeyID:10 WorkDir:20"
)
_UINT = frozenset({
    "AllocCPUS", "AllocNodes", "AssocID", "ConsumedEnergyRaw", "CPUTimeRAW", "DBIndex", "ElapsedRaw", "GID",
    "NCPUS", "NNodes", "NTasks", "Priority", "QOSRAW", "ReqCPUS", "ReqNodes", "ReservationId", "ResvCPURAW",
    "UID", "WCKeyID",
})
_SECS = frozenset({"CPUTime", "Elapsed", "Reserved", "ResvCPU", "Suspended", "SystemCPU", "TotalCPU", "UserCPU"})
_DATES = frozenset({"Eligible", "End", "Start", "Submit"})


class AcctView(Record):
    now: float
    time_format: str | None = None  # SLURM_TIME_FORMAT
    cluster: str = "corral"


Getter = Callable[[Mapping, "Mapping | None", AcctView], "str | None"]


class AcctField(Record):
    name: str
    width: int
    kind: str  # "str", "uint", "secs" or "date"
    value: Getter


def _started(job: Mapping) -> bool:
    return bool(job.get("start_time"))


def _elapsed_s(job: Mapping, step: Mapping | None, view: AcctView) -> int:
    if step is None:
        return records.time_used_s(job, view.now)
    start, end = step.get("start_time"), step.get("end_time") or view.now
    return max(0, int(end) - int(start)) if start else 0


def _step_slices(job: Mapping, step: Mapping) -> list[Mapping]:
    """The part of the allocation a step ran on: the first node for the batch step."""
    slices = list(job.get("slices") or ())
    if step.get("step_id") == "batch":
        return slices[:1]
    names = set(_expand(step.get("nodelist") or ""))
    return [s for s in slices if s["node"] in names] or slices


def _expand(nodelist: str) -> list[str]:
    return hostlist.expand(nodelist) if nodelist else []


def _cpus(job: Mapping, step: Mapping | None) -> int:
    if step is None:
        return records.num_cpus(job)
    return sum(int(s.get("cpus", 0)) for s in _step_slices(job, step)) or 1


def _step_tres(job: Mapping, step: Mapping) -> str:
    held = _step_slices(job, step)
    alloc = {"cpu": str(sum(int(s.get("cpus", 0)) for s in held))}
    gpus = sum(len(s.get("gpus", ())) for s in held)
    if gpus:
        alloc["gres/gpu"] = str(gpus)
    alloc |= {"mem": tres.mem_text(sum(int(s.get("mem_mib", 0)) for s in held)), "node": str(len(held))}
    return tres.sacct_text(alloc)


def _usage(name: str) -> Getter:
    """A sampled field: a step's from its own tasks; a job's from its own tasks unless a batch step shows
    them (Slurm fills the job line of a batch job with nothing but its TotalCPU, over all its steps)."""
    def get(job: Mapping, step: Mapping | None, view: AcctView) -> str | None:
        if step is not None:
            return usage.field(name, step.get("usage"), int(step.get("num_tasks", 1)))
        if name == "TotalCPU":
            own = None if job.get("batch") else job.get("usage")  # a batch step row carries the batch's
            parts = [u for u in [own, *(s.get("usage") for s in job.get("steps") or ())] if u and u.get("samples")]
            return usage.cpu_time(sum(float(u["cpu_s"]) for u in parts)) if parts else None
        if job.get("batch"):
            return None
        return usage.field(name, job.get("usage"), int(job.get("num_tasks", 1)))
    return get


def _date(name: str) -> Getter:
    def get(job: Mapping, step: Mapping | None, view: AcctView) -> str:
        record = step if step is not None else job
        moment = record.get(name)
        if name == "start_time" and not moment and step is None and job.get("end_time"):
            return "None"  # ended without starting: cancelled while pending
        return timefmt.make_time_str(moment, view.now, view.time_format)
    return get


def _job_only(get: Callable[[Mapping, AcctView], str | None]) -> Getter:
    return lambda job, step, view: get(job, view) if step is None else None


def _text(name: str) -> Getter:
    return _job_only(lambda job, view: str(records.get(job, name) or "") or None)


def _time_limit(job: Mapping, raw: bool) -> str:
    limit = job.get("time_limit_s")
    if limit is None:  # Slurm resolves a job's limit when it starts; until then the partition's
        return "UNLIMITED" if _started(job) else "Partition_Limit"
    return str(math.ceil(limit / 60)) if raw else timefmt.time_limit(limit)


def _eligible(job: Mapping, view: AcctView) -> str:
    return timefmt.make_time_str(records.eligible_time(job), view.now, view.time_format)


def _node_list(job: Mapping, step: Mapping | None, view: AcctView) -> str:
    if step is not None:
        return str(step.get("nodelist") or "")
    return job.get("nodelist") or "None assigned"


_GETTERS: Mapping[str, Getter] = {
    **{name: _usage(name) for name in usage.FIELDS},
    "Account": lambda j, s, v: str(records.get(j, "account") or "") or None,
    "AllocCPUS": lambda j, s, v: str(_cpus(j, s)),
    "AllocNodes": lambda j, s, v: str(len(j.get("slices") or ()) if s is None else len(_step_slices(j, s))),
    "AllocTRES": lambda j, s, v: (tres.sacct_text(tres.allocated(j)) or None) if s is None else _step_tres(j, s),
    "Cluster": lambda j, s, v: v.cluster,
    "Comment": _text("comment"),
    "CPUTime": lambda j, s, v: timefmt.elapsed(_elapsed_s(j, s, v) * _cpus(j, s)),
    "CPUTimeRAW": lambda j, s, v: str(_elapsed_s(j, s, v) * _cpus(j, s)),
    "DerivedExitCode": _job_only(lambda j, v: "0:0"),
    "Elapsed": lambda j, s, v: timefmt.elapsed(_elapsed_s(j, s, v)),
    "ElapsedRaw": lambda j, s, v: str(_elapsed_s(j, s, v)),
    "Eligible": lambda j, s, v: (_eligible(j, v) if s is None else _date("start_time")(j, s, v)),
    "End": _date("end_time"),
    "ExitCode": lambda j, s, v: f"{(s or j).get('exit_code', 0)}:{(s or j).get('exit_signal', 0)}",
    "GID": _job_only(lambda j, v: str(records.gid(j))),
    "Group": _job_only(lambda j, v: records.group_name(j)),
    "JobID": lambda j, s, v: jobids.job_id(j) if s is None else jobids.step_id(j, s),
    "JobIDRaw": lambda j, s, v: jobids.raw_job_id(j) if s is None else jobids.step_id(j, s, raw=True),
    "JobName": lambda j, s, v: str((s or j).get("name", "")),
    "NCPUS": lambda j, s, v: str(_cpus(j, s)),
    "NNodes": lambda j, s, v: str(j.get("num_nodes", 1) if s is None else len(_step_slices(j, s))),
    "NodeList": _node_list,
    "NTasks": lambda j, s, v: None if s is None else str(s.get("num_tasks", 1)),
    "Partition": _job_only(lambda j, v: str(j.get("partition", "")) or None),
    "Priority": _job_only(lambda j, v: str(j.get("priority", 0))),
    "QOS": _text("qos"),
    "Reason": _job_only(lambda j, v: str(j.get("reason") or "None")),
    "ReqCPUS": lambda j, s, v: str(int(j.get("num_tasks", 1)) * int(j.get("cpus_per_task", 1))
                                   if s is None else _cpus(j, s)),
    "ReqMem": _job_only(lambda j, v: tres.requested(j)["mem"]),
    "ReqNodes": _job_only(lambda j, v: str(j.get("num_nodes", 1))),
    "ReqTRES": _job_only(lambda j, v: tres.sacct_text(tres.requested(j))),
    "Start": _date("start_time"),
    "State": lambda j, s, v: states.sacct_state(j) if s is None else str(s.get("state", "")),
    "Submit": lambda j, s, v: (timefmt.make_time_str(j.get("submit_time"), v.now, v.time_format)
                               if s is None else _date("start_time")(j, s, v)),
    "Timelimit": _job_only(lambda j, v: _time_limit(j, raw=False)),
    "TimelimitRaw": _job_only(lambda j, v: _time_limit(j, raw=True)),
    "UID": _job_only(lambda j, v: str(records.get(j, "uid"))),
    "User": _job_only(lambda j, v: str(j.get("user", "")) or None),
    "WCKey": _text("wckey"),
    "WorkDir": _job_only(lambda j, v: str(j.get("workdir", "")) or None),
}


def _kind(name: str) -> str:
    if name in _UINT:
        return "uint"
    if name in _SECS:
        return "secs"
    return "date" if name in _DATES else "str"


FIELDS: tuple[AcctField, ...] = tuple(
    AcctField(name, int(width), _kind(name), _GETTERS.get(name, lambda j, s, v: None))
    for name, width in (item.split(":") for item in _WIDTHS.split())
)
