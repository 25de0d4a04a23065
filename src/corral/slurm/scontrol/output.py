"""`scontrol show ...` as a pure function: the parsed command and the controller's records in,
stdout, stderr and the exit status out. requeue, hold and release act on the controller and are
the command's to perform."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral.hostlist import HostlistError
from corral.jobref import JobIdError, parse_job_ref
from corral.slurm.common import jobids
from corral.slurm.scontrol import job as scontrol_job
from corral.slurm.scontrol import show as scontrol_show
from corral.slurm.scontrol.opts import ScontrolCommand
from corral.slurm.scontrol.reservation import show_reservations

Result = tuple[str, str, int]


def _show_jobs(command: ScontrolCommand, jobs: Sequence[Mapping], now: float, time_format: str | None) -> Result:
    if command.args:
        try:
            wanted = parse_job_ref(command.args[0])
        except JobIdError:
            return "", scontrol_job.INVALID_JOB_ID, 1
        jobs = [j for j in jobs if jobids.names(wanted, j)]
        if not jobs:
            return "", scontrol_job.INVALID_JOB_ID, 1
    if not jobs:
        return scontrol_job.NO_JOBS, "", 0
    return scontrol_job.render_jobs(jobs, now, one_liner=command.one_liner, time_format=time_format), "", 0


def _named(kind: str, items: Sequence[Mapping], names: Sequence[str]) -> tuple[list[Mapping], Result | None]:
    if not names:
        return list(items), None
    chosen = [i for i in items if i["name"] == names[0]]
    if not chosen:
        return [], ("", f"{kind} {names[0]} not found\n", 1)
    return chosen, None


def scontrol_show_output(command: ScontrolCommand, *, jobs: Sequence[Mapping] = (), nodes: Sequence[Mapping] = (),
                         partitions: Sequence[Mapping] = (), config: Sequence[tuple[str, str]] = (),
                         reservations: Sequence[Mapping] = (),
                         now: float = 0.0, env: Mapping[str, str] | None = None) -> Result:
    env = env or {}
    time_format = env.get("SLURM_TIME_FORMAT")
    entity, args = command.entity, command.args
    if entity == "jobs":
        return _show_jobs(command, jobs, now, time_format)
    if entity == "nodes":
        chosen, failure = _named("Node", nodes, args)
        return failure or (scontrol_show.render_nodes(chosen, now, one_liner=command.one_liner,
                                                      time_format=time_format), "", 0)
    if entity == "partitions":
        chosen, failure = _named("Partition", partitions, args)
        return failure or (scontrol_show.render_partitions(chosen, nodes, one_liner=command.one_liner), "", 0)
    if entity == "reservations":
        return show_reservations(reservations, nodes, args, now, one_liner=command.one_liner, time_format=time_format)
    if entity == "config":
        return scontrol_show.render_config(config, now, time_format), "", 0
    if entity == "hostnames":
        out, err = scontrol_show.show_hostnames(args[0] if args else env.get("SLURM_NODELIST"))
        return out, err, 0
    if not args:  # hostlist and hostlistsorted need a list
        return "", "invalid encode argument\n", 1
    try:
        return scontrol_show.show_hostlist(args[0], sort=entity == "hostlistsorted"), "", 0
    except HostlistError:  # as for hostnames, Slurm says so and exits 0
        return "", f"Invalid hostlist: {args[0]}\n", 0
