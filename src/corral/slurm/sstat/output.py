"""sstat as a pure function: parsed options and the jobs' records (JobOut with live usage) in, what sstat
prints out. The rows are the running steps a reference names (sstat's step selection), their fields read
as sacct reads a step row (sacct/fields.py), so the two show a step's usage alike."""
from __future__ import annotations

from _collections_abc import Mapping

from corral.jobref import JobRef
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacct.fields import FIELDS, AcctView
from corral.slurm.sacct.format import PARSABLE, PARSABLE2, Layout, header_lines, parse_fields, row_line
from corral.slurm.sstat.opts import SstatOptions

# sstat.c fields[]: what sstat can show (their widths are sacct's).
STAT_NAMES = frozenset({
    "AveCPU", "AveCPUFreq", "AveDiskRead", "AveDiskWrite", "AvePages", "AveRSS", "AveVMSize", "ConsumedEnergy",
    "ConsumedEnergyRaw", "JobID", "MaxDiskRead", "MaxDiskReadNode", "MaxDiskReadTask", "MaxDiskWrite",
    "MaxDiskWriteNode", "MaxDiskWriteTask", "MaxPages", "MaxPagesNode", "MaxPagesTask", "MaxRSS", "MaxRSSNode",
    "MaxRSSTask", "MaxVMSize", "MaxVMSizeNode", "MaxVMSizeTask", "MinCPU", "MinCPUNode", "MinCPUTask",
    "NodeList", "NTasks", "ReqCPUFreq", "ReqCPUFreqMin", "ReqCPUFreqMax", "ReqCPUFreqGov", "TRESUsageInAve",
    "TRESUsageInMax", "TRESUsageInMaxNode", "TRESUsageInMaxTask", "TRESUsageInMin", "TRESUsageInMinNode",
    "TRESUsageInMinTask", "TRESUsageInTot", "TRESUsageOutAve", "TRESUsageOutMax", "TRESUsageOutMaxNode",
    "TRESUsageOutMaxTask", "TRESUsageOutMin", "TRESUsageOutMinNode", "TRESUsageOutMinTask", "TRESUsageOutTot",
})
HELP_FORMAT = "".join(f"{name}\n" for name in sorted((f.name for f in FIELDS if f.name in STAT_NAMES), key=str.lower))


def layout(options: SstatOptions) -> Layout:
    try:
        columns = parse_fields(options.fields)
    except SlurmCommandError as exc:
        raise SlurmCommandError(exc.stderr.replace("sacct:", "sstat:", 1), exc.exit_code) from None
    for column in columns:
        if column.field.name not in STAT_NAMES:
            raise SlurmCommandError(f'sstat: error: Invalid field requested: "{column.field.name}"\n', 1)
    parsable = {"parsable": PARSABLE, "parsable2": PARSABLE2}.get(options.parsable or "")
    return Layout(columns, parsable=parsable, header=options.header)


def running_rows(job: Mapping, ref: JobRef, all_steps: bool) -> tuple[list[Mapping | None], str | None]:
    """The rows a reference names among the job's running steps (None stands for the own tasks of a job
    without a batch step), or the error sstat prints."""
    running = job.get("state") in ("RUNNING", "COMPLETING")
    steps = [s for s in job.get("steps") or () if running and s.get("state") == "RUNNING"]
    if ref.step is not None:
        found = [s for s in steps if str(s.get("step_id")) == ref.step]
        if not found and ref.step == "batch" and running and not job.get("batch"):
            return [None], None
        return (found, None) if found else ([], f"StepId={job_key(ref)}.{ref.step} not found running.")
    if not running:
        return [], f"No steps running for job {job_key(ref)}"
    rows: list[Mapping | None] = [s for s in steps if all_steps or s.get("step_id") != "batch"]
    if not job.get("batch") and (all_steps or not rows):
        rows.insert(0, None)  # its own tasks: no step of Slurm's stands for them
    return rows, None


def sstat_output(options: SstatOptions, jobs: Mapping[str, Mapping | None], now: float) -> tuple[str, str, int]:
    """(stdout, stderr, exit status); `jobs`: the record each reference names by its job_key (`N`, `N_I`),
    None if the controller has none."""
    chosen = layout(options)
    view = AcctView(now)
    lines = header_lines(chosen) if chosen.header else []
    errors = list(options.warnings)
    for ref in options.job_refs:
        job = jobs.get(job_key(ref))
        if job is None:
            errors.append(f"sstat: error: couldn't get steps for job {job_key(ref)}\n")
            continue
        rows, error = running_rows(job, ref, options.all_steps)
        if error:
            errors.append(f"sstat: error: {error}\n")
        lines.extend(row_line(job, step, chosen, view) for step in rows)
    return "".join(line + "\n" for line in lines), "".join(errors), 0


def job_key(ref: JobRef) -> str:
    """The job a reference names, without its step: `N` or `N_I`."""
    return ref.text.partition(".")[0]
