"""scontrol: `show job|node|partition|reservation|config|hostnames|hostlist`, `requeue`, `hold` and `release`
against corral's controller, as Slurm 22.05's scontrol. `show hostnames|hostlist` need no
controller (jobs call them to split SLURM_JOB_NODELIST)."""
from __future__ import annotations

import os
import sys
import time
from _collections_abc import Mapping, Sequence

from corral.jobref import JobIdError, parse_job_ref
from corral.slurm.common.command import (
    MIN_JOB_AGE_S,
    SLURM_VERSION,
    Result,
    action_text,
    array_siblings,
    connect,
    run,
    still_known,
)
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.scontrol.opts import ScontrolCommand, parse_scontrol

USAGE = """\
Usage: scontrol [<OPTION>] [<COMMAND>]
    Valid <OPTION> values are: -a, -d, -h, -M, -o, -Q, -v, -V
    Valid <COMMAND> values (in corral) are: show <ENTITY> [<ID>], requeue <job_list>,
    hold <job_list>, release <job_list>, update <SPECIFICATIONS>, version, help
    <ENTITY> may be config, hostnames, hostlist, hostlistsorted, job, node, partition or reservation.
"""
_LOCAL_ENTITIES = ("hostnames", "hostlist", "hostlistsorted")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run("scontrol", lambda: scontrol(args, os.environ))


def scontrol(argv: Sequence[str], env: Mapping[str, str]) -> Result:
    command = parse_scontrol(argv)
    if command.action or command.keyword in ("help", "version"):
        action = command.action or ("usage" if command.keyword == "help" else "version")
        out, err, code = action_text("scontrol", action, USAGE)
        return out, "".join(command.warnings) + err, code
    if command.keyword == "show":
        return show(command, env)
    if command.keyword == "update":
        from corral.slurm.scontrol.update import update

        return update(command, connect(env))
    from corral.slurm.scontrol.actions import job_actions  # requeue, hold, release

    return job_actions(command, connect(env))


def show(command: ScontrolCommand, env: Mapping[str, str]) -> Result:
    # Imported here: the formatters bring `re` (hostlist), which requeue, hold and release do without.
    from corral.slurm.scontrol.output import scontrol_show_output

    warnings = "".join(command.warnings)
    if command.entity in _LOCAL_ENTITIES:
        out, err, code = scontrol_show_output(command, env=env)
        return out, warnings + err, code
    controller = connect(env)
    now = time.time()
    records: dict[str, object] = {}
    if command.entity == "jobs":
        records["jobs"] = jobs_to_show(controller, command.args, now)
    if command.entity in ("nodes", "partitions", "reservations"):
        records["nodes"] = controller.nodes()
    if command.entity == "reservations":
        records["reservations"] = controller.reservations()
    if command.entity == "partitions":
        records["partitions"] = controller.partitions()
    if command.entity == "config":
        records["config"] = config_pairs(controller)
    out, err, code = scontrol_show_output(command, now=now, env=env, **records)
    return out, warnings + err, code


def jobs_to_show(controller: Controller, args: Sequence[str], now: float) -> list[dict]:
    """The jobs slurmctld would still hold (unfinished, or finished within MinJobAge); with an id,
    that job and, for an array's id, its tasks. The caller picks and complains."""
    if not args:
        return sorted(controller.accounting(since=now - MIN_JOB_AGE_S), key=lambda j: j["id"])
    try:
        job = controller.job(parse_job_ref(args[0]).job_id)
    except JobIdError:
        return []
    except ApiError as exc:
        if exc.status == 404:
            return []
        raise
    family = array_siblings(controller, job) if job.get("array_job_id") == job["id"] else [job]
    return [j for j in family if still_known(j, now)]


def config_pairs(controller: Controller) -> list[tuple[str, str]]:
    """The settings corral has that `scontrol show config` lists, under Slurm's names."""
    weights = (controller.tenancy().get("priority") or {})
    host = controller.host
    return [
        ("ClusterName", str(controller.health().get("cluster", "corral"))),
        ("JobRequeue", "1"),
        ("MinJobAge", f"{MIN_JOB_AGE_S} sec"),
        ("PriorityType", "priority/multifactor"),
        ("PriorityWeightAge", str(weights.get("weight_age", 0))),
        ("PriorityWeightFairshare", str(weights.get("weight_fairshare", 0))),
        ("PriorityWeightJobSize", str(weights.get("weight_job_size", 0))),
        ("PriorityWeightPartition", str(weights.get("weight_partition", 0))),
        ("PriorityWeightQOS", str(weights.get("weight_qos", 0))),
        ("SchedulerType", "sched/backfill"),
        ("SelectType", "select/cons_tres"),
        ("SlurmctldHost[0]", host),
        ("SlurmctldPort", str(controller.port)),
        ("SLURM_VERSION", f"{SLURM_VERSION} (corral)"),
    ]
