"""Real Slurm's accounting, `sacct -P` (or `-p`) output with a header line, as a Workload.

Needed columns: JobID, Submit, Start, End, Timelimit, User, Account, Partition, State, and either
AllocTRES or AllocNodes + ReqTRES (JobIDRaw, JobName, AllocNodes and ReqTRES are used when present).
Step rows (`123.batch`, `123.0`) are skipped; so are jobs that never started (Start `None`/`Unknown`)
and jobs still running (End `Unknown`), counted in the notes. Times are ISO (`2024-05-01T10:00:00`,
read as UTC: only differences matter, but a DST change inside a local-time export shifts by an hour;
`SLURM_TIME_FORMAT=%s` avoids that) or epoch seconds.

Shape: nodes from AllocNodes (else the TRES `node=`); GPUs, CPUs and memory from AllocTRES, falling
back to ReqTRES per item (22.05 leaves `mem` out of AllocTRES unless memory is a consumable
resource), spread evenly over the nodes and rounded up. A single typed GPU (`gres/gpu:a100=`)
becomes the model constraint. Job ids are JobIDRaw (else JobID); arrays' `123_4` ids without
JobIDRaw get fresh ids above the largest numeric one.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone

from corral.jobref import ascii_number
from corral.sim.traces._csv import TraceFormatError, open_text
from corral.sim.workload import GPU_MILLI_WHOLE, TraceJob, Workload

REQUIRED = ("JobID", "Submit", "Start", "End", "Timelimit", "User", "Account", "Partition", "State")
_NO_TIME = {"", "unknown", "none", "n/a"}
_NO_LIMIT = {"", "unlimited", "partition_limit", "invalid", "none"}
_MEM_UNITS_MIB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024, "P": 1024 ** 3}
_MEM = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)$")


@dataclass(frozen=True, slots=True)
class _Line:
    path: str
    number: int
    values: dict[str, str]

    def error(self, message: str) -> TraceFormatError:
        return TraceFormatError(self.path, self.number, message)


def read_sacct(path: str | os.PathLike[str]) -> Workload:
    lines = list(_parse(path))
    job_lines = [ln for ln in lines if "." not in ln.values["JobID"]]
    finished, never_started, running = [], 0, 0
    for ln in job_lines:
        start, end = parse_time(ln, "Start"), parse_time(ln, "End")
        if start is None:
            never_started += 1
        elif end is None:
            running += 1
        else:
            finished.append(ln)
    ids = _job_ids(finished)
    origin_s = min((parse_time(ln, "Submit") or 0.0 for ln in finished), default=0.0)
    jobs = tuple(_job(ln, job_id, origin_s) for ln, job_id in zip(finished, ids, strict=True))
    notes = [f"{len(jobs)} finished job(s) of {len(job_lines)} in sacct output; "
             f"{len(lines) - len(job_lines)} step row(s) ignored"]
    if never_started:
        notes.append(f"{never_started} job(s) skipped: never started")
    if running:
        notes.append(f"{running} job(s) skipped: still running")
    return Workload(jobs, "slurm-sacct", f"{path}: Slurm sacct -P output", origin_s, tuple(notes))


def _parse(path: str | os.PathLike[str]):
    with open_text(path) as f:
        header: list[str] | None = None
        for number, text in enumerate(f, 1):
            text = text.rstrip("\r\n")
            if not text.strip():
                continue
            fields = text.split("|")
            if header is None:
                header = _header(str(path), number, fields)
                continue
            if len(fields) == len(header) + 1 and fields[-1] == "":
                fields.pop()  # -p/--parsable ends every line with the delimiter
            if len(fields) != len(header):
                raise TraceFormatError(path, number, f"{len(fields)} fields, header has {len(header)}")
            yield _Line(str(path), number, dict(zip(header, fields, strict=True)))
        if header is None:
            raise TraceFormatError(path, 1, "empty file (expected sacct's header line)")


def _header(path: str, number: int, fields: list[str]) -> list[str]:
    if fields and fields[-1] == "":
        fields = fields[:-1]
    missing = [c for c in REQUIRED if c not in fields]
    if "AllocTRES" not in fields and not {"AllocNodes", "ReqTRES"} <= set(fields):
        missing.append("AllocTRES (or AllocNodes and ReqTRES)")
    if missing:
        hint = "" if len(fields) > 1 else " (is this `sacct -P` output? fields must be separated by '|')"
        raise TraceFormatError(path, number, f"header lacks {', '.join(missing)}{hint}")
    return fields


def parse_time(line: _Line, column: str) -> float | None:
    """Epoch seconds of a sacct time column; None for Unknown/None (not started, not ended)."""
    raw = line.values[column].strip()
    if raw.lower() in _NO_TIME:
        return None
    if raw.isdigit():
        return float(raw)
    try:
        return datetime.strptime(raw, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise line.error(f"column {column!r}: {raw!r} is not a Slurm time") from None


def parse_time_limit_s(text: str) -> int | None:
    """Seconds of a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; None for UNLIMITED & co."""
    raw = text.strip()
    if raw.lower() in _NO_LIMIT:
        return None
    days, _, clock = raw.rpartition("-") if "-" in raw else ("0", "", raw)
    parts = clock.split(":")
    if not days.isdigit() or not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        raise ValueError(f"{text!r} is not a Slurm time limit")
    numbers = [int(p) for p in parts]
    if "-" in raw:  # after days the fields are hours[:minutes[:seconds]]
        hours, minutes, seconds = (numbers + [0, 0])[:3]
    elif len(numbers) == 3:
        hours, minutes, seconds = numbers
    else:  # minutes[:seconds]
        hours, (minutes, seconds) = 0, (numbers + [0])[:2]
    return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_tres(text: str) -> dict[str, str]:
    """`billing=1,cpu=2,gres/gpu=1,mem=62.50G,node=1` -> {key: value}."""
    out = {}
    for item in filter(None, text.strip().split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"TRES item {item!r} is not key=value")
        out[key] = value
    return out


def mem_mib(text: str) -> float:
    match = _MEM.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a Slurm memory size")
    return float(match["n"]) * _MEM_UNITS_MIB[match["unit"] or "M"]


def _job_ids(lines: list[_Line]) -> list[int]:
    raw = [ascii_number(ln.values.get("JobIDRaw") or ln.values["JobID"]) for ln in lines]
    fresh = max((r for r in raw if r is not None), default=0) + 1
    ids = []
    for r in raw:
        if r is not None:  # ASCII digits only (str.isdigit() takes any script's digits)
            ids.append(r)
        else:
            ids.append(fresh)
            fresh += 1
    return ids


def _job(line: _Line, job_id: int, origin_s: float) -> TraceJob:
    submit, start, end = (parse_time(line, c) for c in ("Submit", "Start", "End"))
    assert start is not None and end is not None
    submit = submit if submit is not None else start
    if not submit <= start <= end:
        raise line.error(f"times out of order: submit {submit}, start {start}, end {end}")
    try:
        nodes, gpus, cpus, mem, model = _shape(line)
        limit_s = parse_time_limit_s(line.values["Timelimit"])
    except ValueError as exc:
        raise line.error(str(exc)) from None
    return TraceJob(
        id=job_id, submit_s=submit - origin_s, duration_s=end - start, num_nodes=nodes, gpus_per_node=gpus,
        gpu_milli=GPU_MILLI_WHOLE, cpus_per_node=cpus, mem_per_node_mib=mem, gpu_model=model,
        user=line.values["User"], account=line.values["Account"], queue=line.values["Partition"],
        time_limit_s=limit_s, name=line.values.get("JobName", ""),
    )


def _shape(line: _Line) -> tuple[int, int, int, int, str | None]:
    alloc = parse_tres(line.values.get("AllocTRES", ""))
    requested = parse_tres(line.values.get("ReqTRES", ""))
    tres = {**requested, **alloc}  # what was allocated, else what was asked for
    alloc_nodes = line.values.get("AllocNodes", "").strip()
    nodes = int(alloc_nodes) if alloc_nodes.isdigit() and int(alloc_nodes) > 0 else int(tres.get("node", "1"))
    typed = {k.split(":", 1)[1]: int(v) for k, v in tres.items() if k.startswith("gres/gpu:")}
    total_gpus = int(tres["gres/gpu"]) if "gres/gpu" in tres else sum(typed.values())
    mem_text = alloc.get("mem") if mem_mib(alloc.get("mem", "0")) > 0 else requested.get("mem", "0")
    model = next(iter(typed)) if len(typed) == 1 else None
    return (nodes, math.ceil(total_gpus / nodes), math.ceil(int(tres.get("cpu", "1")) / nodes),
            math.ceil(mem_mib(mem_text or "0") / nodes), model)
