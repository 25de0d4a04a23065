"""`scontrol update JobId=<list> Key=Value...` and `scontrol update NodeName=<hostlist> State=... Reason=...`,
with Slurm 22.05's messages (recorded from real scontrol on this machine).

Jobs: TimeLimit (Slurm's time formats, or +N/-N minutes relative to the current limit), JobName/Name,
Comment, Priority (a waiting job's). Nodes: State=DRAIN (with a Reason) or State=RESUME/UNDRAIN.
Anything else is refused before any change is made."""
from __future__ import annotations

from corral import limits
from corral.jobref import ascii_number, split_job_list
from corral.slurm.common.command import Result
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.http import ApiError, Controller
from corral.slurm.scontrol.actions import resolve, slurm_reason
from corral.slurm.scontrol.opts import ScontrolCommand

JOB_KEYS = {"timelimit": "time_limit_s", "jobname": "name", "name": "name", "comment": "comment",
            "priority": "priority"}
NODE_KEYS = ("nodename", "state", "reason")


def update(command: ScontrolCommand, controller: Controller) -> Result:
    pairs = _pairs(command.args)
    keys = [k.lower() for k, _ in pairs]
    if keys and keys[0] in ("jobid", "job"):
        return _update_jobs(pairs, controller, command)
    if keys and keys[0] in ("nodename", "node"):
        return _update_nodes(pairs, controller, command)
    raise SlurmCommandError("No valid entity in update command\nInput line must include \"NodeName\", "
                            "\"PartitionName\", \"Reservation/ReservationName\", or \"JobId\"\n", 1)


def _pairs(args) -> list[tuple[str, str]]:
    pairs = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq:
            raise SlurmCommandError(f"Update of this parameter is not supported: {arg}\nRequest aborted\n", 1)
        pairs.append((key, value))
    return pairs


def _update_jobs(pairs, controller: Controller, command: ScontrolCommand) -> Result:
    ids_text, changes_text = pairs[0][1], pairs[1:]
    relative: dict[str, int] = {}
    changes: dict[str, object] = {}
    for key, value in changes_text:
        field = JOB_KEYS.get(key.lower())
        if field is None:
            raise SlurmCommandError(f"Update of this parameter is not supported: {key}={value}\nRequest aborted\n", 1)
        if field == "time_limit_s":
            if value[:1] in "+-" and ascii_number(value[1:]) is not None:
                relative[field] = int(value) * 60
            else:
                changes[field] = _time_limit(value)
        elif field == "priority":
            priority = ascii_number(value, limits.PRIORITY_MAX)
            if priority is None:
                # Slurm's line; for a number too large, corral's range after it.
                too_large = value.isascii() and value.isdigit()
                note = f" (corral's priorities are 0 to {limits.PRIORITY_MAX})" if too_large else ""
                raise SlurmCommandError(f"scontrol: error: Invalid Priority value: {value}{note}\n", 1)
            changes[field] = priority
        else:
            changes[field] = value
    failures = []
    for item in split_job_list(ids_text):
        try:
            for job_id in resolve(controller, item):
                body = dict(changes)
                if relative:
                    current = int(controller.job(job_id)["time_limit_s"])
                    body["time_limit_s"] = max(60, current + relative["time_limit_s"])
                controller.call("POST", f"/jobs/{job_id}/update", body=body)
        except ApiError as exc:
            if exc.status not in (403, 404, 409, 422):
                raise
            failures.append(f"{slurm_reason(exc) if exc.status != 422 else exc.detail} for job {item}\n")
    return "", "".join(command.warnings) + ("" if command.quiet else "".join(failures)), 1 if failures else 0


def _time_limit(value: str) -> int:
    from corral.slurm.sbatch import values as sbatch_values

    try:
        return sbatch_values.time_limit(value, "time")
    except SlurmCommandError:
        raise SlurmCommandError("scontrol: error: Invalid TimeLimit value\n", 1) from None


def _update_nodes(pairs, controller: Controller, command: ScontrolCommand) -> Result:
    from corral import hostlist

    settings = {k.lower(): v for k, v in pairs[1:]}
    unknown = [f"{k}={v}" for k, v in pairs[1:] if k.lower() not in NODE_KEYS]
    if unknown:
        raise SlurmCommandError(f"Update of this parameter is not supported: {unknown[0]}\nRequest aborted\n", 1)
    state = settings.get("state", "").upper()
    if state in ("DRAIN", "DOWN"):
        if not settings.get("reason"):
            raise SlurmCommandError("You must specify a reason when DOWNING or DRAINING a node. Request denied\n", 1)
        body = {"drain": True, "reason": settings["reason"]}
    elif state in ("RESUME", "UNDRAIN", "IDLE"):
        body = {"drain": False}
    else:
        raise SlurmCommandError(f"scontrol: error: State={settings.get('state', '')} is not supported by corral: "
                                f"use DRAIN (with a Reason) or RESUME\n", 1)
    try:
        names = hostlist.expand(pairs[0][1])
    except hostlist.HostlistError as exc:
        raise SlurmCommandError(f"scontrol: error: Invalid node name specified: {exc}\n", 1) from None
    failures = []
    for name in names:
        try:
            controller.call("POST", f"/nodes/{name}", body=body)
        except ApiError as exc:
            if exc.status == 403:
                failures.append("slurm_update error: Invalid user id\n")
                continue
            if exc.status != 404:
                raise
            failures.append(f"Invalid node name specified for node {name}\n")
    return "", "".join(command.warnings) + "".join(failures), 1 if failures else 0
