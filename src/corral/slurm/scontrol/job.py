"""`scontrol show job`: Slurm's `K=V` block per job record (slurm_sprint_job_info in 22.05).

Keys corral has no data for print what Slurm prints when they are unset (`(null)`, `N/A`, `*`).
With `one_liner` (scontrol -o) the lines of a block are joined by spaces."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping

from corral.slurm.common import jobids, records, states, timefmt, tres

NO_VAL = 4294967294  # what %a expands to in the remainder's paths: its task id is NO_VAL


def _null(value: object) -> str:
    return str(value) if value not in (None, "") else "(null)"


def expand_path(pattern: str, job: Mapping) -> str:
    """The %-patterns of --output/--error that depend on the job alone: %j %J %A %a %x %u %%."""
    array_id = records.get(job, "array_job_id")
    task = records.get(job, "array_task_id")
    values = {"j": str(job["id"]), "J": str(job["id"]), "x": str(job.get("name", "")), "u": str(job.get("user", "")),
              "A": str(array_id if array_id is not None else job["id"]),
              "a": str(task if task is not None else NO_VAL), "%": "%"}
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "%" and i + 1 < len(pattern) and pattern[i + 1] in values:
            out.append(values[pattern[i + 1]])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    path = "".join(out)
    workdir = str(job.get("workdir", ""))
    return path if path.startswith("/") or not workdir else f"{workdir.rstrip('/')}/{path}"


def _header(job: Mapping) -> str:
    if records.get(job, "array_job_id") is None:
        return f"JobId={job['id']} JobName={job.get('name', '')}"
    throttle = records.get(job, "array_throttle")
    spec = records.get(job, "array_task_spec")
    if throttle is None and spec and "%" in spec:
        throttle = spec.rpartition("%")[2]
    throttle_text = f" ArrayTaskThrottle={throttle}" if throttle else ""
    return (f"JobId={job['id']} ArrayJobId={records.get(job, 'array_job_id')} "
            f"ArrayTaskId={jobids.array_task_id(job)}{throttle_text} JobName={job.get('name', '')}")


def _times(job: Mapping, now: float, fmt: str | None) -> list[str]:
    def stamp(epoch: float | None) -> str:
        return timefmt.make_time_str(epoch, now, fmt)
    pending = states.job_state(job) == "PENDING"
    start = job.get("start_time") or (job.get("estimated_start") if pending else None)
    end = job.get("end_time")
    limit = job.get("time_limit_s")
    if end is None and start and limit is not None:
        end = start + limit
    held = records.get(job, "held")
    used = records.time_used_s(job, now)
    return [
        f"RunTime={timefmt.elapsed(used)} TimeLimit={timefmt.time_limit(limit)} TimeMin=N/A",
        f"SubmitTime={stamp(job.get('submit_time'))} EligibleTime={stamp(records.eligible_time(job))}",
        f"AccrueTime={stamp(None if held else job.get('submit_time'))}",
        f"StartTime={stamp(start)} EndTime={stamp(end)} Deadline=N/A",
        f"SuspendTime=None SecsPreSuspend=0 LastSchedEval={stamp(job.get('start_time') or job.get('submit_time'))}"
        " Scheduler=Main",
    ]


def _shape(job: Mapping) -> list[str]:
    nodes = int(job.get("num_nodes", 1))
    pending = states.job_state(job) == "PENDING"
    # Slurm shows a pending job's node range; a multi-node request is always an exact count here.
    node_text = f"{nodes}-{nodes}" if pending and nodes > 1 else str(nodes)
    host = records.batch_host(job)
    lines = [f"NodeList={job.get('nodelist') or ''}"]
    if host:
        lines.append(f"BatchHost={host}")
    return [*lines,
        f"NumNodes={node_text} NumCPUs={records.num_cpus(job)} NumTasks={job.get('num_tasks', 1)} "
        f"CPUs/Task={job.get('cpus_per_task', 1)} ReqB:S:C:T=0:0:*:*",
        f"TRES={tres.scontrol_job_tres(job)}",
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        f"MinCPUsNode={job.get('cpus_per_task', 1)} "
        f"MinMemoryNode={tres.mem_text(int(job.get('mem_per_node_mib', 0)), exact=True)} MinTmpDiskNode=0",
    ]


def job_lines(job: Mapping, now: float, time_format: str | None = None) -> list[str]:
    """The lines of one block, without indentation."""
    uid, gid = records.get(job, "uid"), records.gid(job)
    output = str(job.get("output") or "slurm-%j.out")
    batch_flag = 0 if job.get("allocation") else 1  # salloc and srun's own allocations: Slurm's batch_flag 0
    lines = [
        _header(job),
        f"UserId={job.get('user', '')}({uid}) GroupId={records.group_name(job)}({gid}) MCS_label=N/A",
        f"Priority={job.get('priority', 0)} Nice=0 Account={_null(records.get(job, 'account'))} "
        f"QOS={_null(records.get(job, 'qos'))}",
        f"JobState={states.job_state(job)} Reason={records.reason(job)} "
        f"Dependency={_null(records.get(job, 'dependency'))}",
        f"Requeue={int(bool(records.get(job, 'requeue')))} Restarts={job.get('restart_count', 0)} "
        f"BatchFlag={batch_flag} Reboot=0 ExitCode={job.get('exit_code', 0)}:{job.get('exit_signal', 0)}",
        *_times(job, now, time_format),
        f"Partition={job.get('partition', '')} AllocNode:Sid={records.get(job, 'submit_host') or '(null)'}:0",
        f"ReqNodeList={_null(records.get(job, 'req_nodelist'))} ExcNodeList={_null(records.get(job, 'exc_nodelist'))}",
        *_shape(job),
        f"Features={_null(records.get(job, 'constraint'))} DelayBoot=00:00:00",
        f"OverSubscribe={'NO' if records.get(job, 'exclusive') else 'OK'} Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={_null(records.get(job, 'command'))}",
        f"WorkDir={job.get('workdir', '')}",
    ]
    if records.get(job, "comment"):
        lines.append(f"Comment={records.get(job, 'comment')} ")
    if records.get(job, "container_image"):  # pyxis's options, which real scontrol does not show: only when set
        lines.append(_container_line(job))
    if batch_flag:  # api/job_info.c prints the files of batch jobs only
        lines += [f"StdErr={expand_path(str(job.get('error') or output), job)}", f"StdIn={records.get(job, 'stdin')}",
                  f"StdOut={expand_path(output, job)}"]
    lines.append("Power=")
    per_node = tres.tres_per_node(job)
    if per_node:
        lines.append(f"TresPerNode={per_node}")
    return lines


def _container_line(job: Mapping) -> str:
    fields = [("ContainerImage", "container_image"), ("ContainerMounts", "container_mounts"),
              ("ContainerWorkdir", "container_workdir"), ("ContainerName", "container_name"),
              ("ContainerEnv", "container_env")]
    text = " ".join(f"{label}={_null(records.get(job, key))}" for label, key in fields)
    home = records.get(job, "container_mount_home")
    return (f"{text} ContainerMountHome={'no' if home is False else 'yes'} "
            f"ContainerRemapRoot={'yes' if records.get(job, 'container_remap_root') else 'no'}")


def render_jobs(jobs: Iterable[Mapping], now: float, *, one_liner: bool = False,
                time_format: str | None = None) -> str:
    blocks = []
    for job in jobs:
        lines = job_lines(job, now, time_format)
        if one_liner:
            blocks.append(" ".join(lines) + " \n")
        else:
            blocks.append(lines[0] + "\n" + "".join(f"   {line}\n" for line in lines[1:]) + "   \n\n")
    return "".join(blocks)


NO_JOBS = "No jobs in the system\n"
INVALID_JOB_ID = "slurm_load_jobs error: Invalid job id specified\n"
