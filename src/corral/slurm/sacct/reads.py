"""Which fields of a job record a sacct call reads, so that it asks the controller for those only.

The controller's cost of a listing grows with the fields asked for (each is projected and encoded per job):
sacct's default format prints seven columns from about twenty fields, where every field but the history is 68.
`READS` is kept true by tests/slurm/test_sacct_reads.py: every field printed from records cut down to what
`fields_for` names reads as from the whole records, and reads no key outside it."""
from __future__ import annotations

from _collections_abc import Mapping

from corral.slurm.common import usage
from corral.slurm.sacct.format import Layout

# What every call reads whatever it prints: select_jobs' filters and order, the pending array tasks' merge
# (combine_pending_array_tasks), and a step row's job id.
_ALWAYS = (
    "id", "state", "user", "uid", "partition", "name", "account", "qos", "submit_time", "reason",
    "array_job_id", "array_task_id", "array_task_spec", "array_throttle",
)
_CPUS = ("slices", "num_tasks", "cpus_per_task")
_ELAPSED = ("start_time", "end_time", "state")
_REQUESTED = ("num_nodes", "num_tasks", "cpus_per_task", "mem_per_node_mib", "gpu_share", "total_gpus",
              "gpus_per_node")
_USAGE = ("batch", "usage", "num_tasks", "steps")

# sacct field -> the job record's fields its getter reads (sacct/fields.py), beyond _ALWAYS. A step row's
# values come from the job's `steps`, asked for whenever step rows print. Fields not named read nothing.
READS: Mapping[str, tuple[str, ...]] = {
    **{name: _USAGE for name in usage.FIELDS},
    "AllocCPUS": _CPUS,
    "AllocNodes": ("slices",),
    "AllocTRES": ("slices", "gpu_share"),
    "Comment": ("comment",),
    "CPUTime": (*_ELAPSED, *_CPUS),
    "CPUTimeRAW": (*_ELAPSED, *_CPUS),
    "Elapsed": _ELAPSED,
    "ElapsedRaw": _ELAPSED,
    "Eligible": ("eligible_time", "held", "exit_signal", "start_time"),
    "End": ("end_time",),
    "ExitCode": ("exit_code", "exit_signal"),
    "GID": ("gid", "group"),
    "Group": ("group",),
    "NCPUS": _CPUS,
    "NNodes": ("num_nodes", "slices"),
    "NodeList": ("nodelist",),
    "Priority": ("priority",),
    "ReqCPUS": _CPUS,
    "ReqMem": _REQUESTED,
    "ReqNodes": ("num_nodes",),
    "ReqTRES": _REQUESTED,
    "Start": ("start_time", "end_time"),
    "State": ("cancelled_by_uid",),
    "Timelimit": ("time_limit_s", "start_time"),
    "TimelimitRaw": ("time_limit_s", "start_time"),
    "WCKey": ("wckey",),
    "WorkDir": ("workdir",),
}


def fields_for(layout: Layout, available: tuple[str, ...], *, nodes: bool = False) -> tuple[str, ...]:
    """The fields of `available` (those the controller sends, in their order) that a call printing
    `layout` reads; `nodes` when -N filters on the node list."""
    wanted = set(_ALWAYS)
    for column in layout.columns:
        wanted.update(READS.get(column.field.name, ()))
    if layout.steps:
        wanted.add("steps")
    if nodes:
        wanted.add("nodelist")
    return tuple(name for name in available if name in wanted)
