"""`squeue -s/--steps[=J.S,...]`: the running steps of running jobs, batch steps included, as Slurm
22.05 prints them (default format `%.15i %.8j %.9P %.8u %.9M %N`, recorded from real squeue here)."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.slurm.common import jobids, timefmt
from corral.slurm.common.formatspec import Format, parse_percent_format
from corral.slurm.squeue.fields import Field, View
from corral.slurm.squeue.format import render

STEP_FORMAT = "%.15i %.8j %.9P %.8u %.9M %N"
STEP_LETTERS: Mapping[str, Field] = {
    "i": Field("STEPID", lambda s, v: s["stepid"]),
    "j": Field("NAME", lambda s, v: s["name"]),
    "P": Field("PARTITION", lambda s, v: s["partition"]),
    "u": Field("USER", lambda s, v: s["user"]),
    "M": Field("TIME", lambda s, v: timefmt.squeue_duration(max(0, int(v.now) - int(s["start_time"]))), cut=False),
    "S": Field("START_TIME", lambda s, v: timefmt.make_time_str(s["start_time"], v.now, v.time_format)),
    "l": Field("TIME_LIMIT", lambda s, v: "UNLIMITED"),
    "N": Field("NODELIST", lambda s, v: s["nodelist"], cut=False, header_cut=False),
}


def parse_step_format(spec: str | None) -> Format:
    return parse_percent_format(spec or STEP_FORMAT, STEP_LETTERS,
                                lambda letter: f"squeue: error: Invalid job step format specification: {letter}\n")


def step_rows(jobs: Sequence[Mapping], wanted: Sequence[str]) -> list[dict]:
    """One row per running step of a running job; `wanted`: `J.S` ids to keep (empty: all)."""
    rows = []
    for job in jobs:
        if job.get("state") not in ("RUNNING", "COMPLETING"):
            continue
        for step in job.get("steps") or ():
            if step.get("end_time") is not None or step.get("state") == "PENDING":
                continue
            stepid = jobids.step_id(job, step)
            if wanted and stepid not in wanted:
                continue
            rows.append({"stepid": stepid, "name": step.get("name", ""), "partition": job.get("partition", ""),
                         "user": job.get("user", ""), "start_time": step.get("start_time") or job["start_time"],
                         "nodelist": step.get("nodelist", ""), "order": _order(job, step)})
    return sorted(rows, key=lambda r: r["order"])


def _order(job: Mapping, step: Mapping) -> tuple:
    name = str(step.get("step_id"))
    return (job["id"], 0 if name.isdigit() else 1, int(name) if name.isdigit() else 0, name)


def squeue_steps_output(fmt: Format, jobs: Sequence[Mapping], wanted: Sequence[str], view: View,
                        header: bool) -> str:
    return render(step_rows(jobs, wanted), fmt, view, header=header)
