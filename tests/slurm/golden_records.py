"""Corral-shaped records equivalent to the jobs, nodes and partitions of a golden recording.

record_golden.py saved, next to the command outputs, snapshots of real Slurm's own view
(`scontrol show job -o`, `sacct -P`, `scontrol show node -o`, `scontrol show partition -o`). This
module turns them into the dicts corral's API returns (JobOut, NodeOut, PartitionOut, plus the
planned optional fields), so the formatters can be fed the same jobs Slurm printed.

Conversions that lose nothing the tests compare: times go through local time both ways (so the
machine's time zone does not matter); a job's CPUs and GPUs are spread evenly over its nodes."""
from __future__ import annotations

import json
import time
from functools import cache
from pathlib import Path

from corral import hostlist

GOLDEN = Path(__file__).resolve().parent / "golden"
_UNSET_TIMES = ("Unknown", "None", "N/A", "")


@cache
def fixture(name: str) -> dict:
    return json.loads((GOLDEN / f"{name}.json").read_text())


def fixture_names() -> list[str]:
    return sorted(p.stem for p in GOLDEN.glob("*.json") if not p.stem.startswith("context_"))


def epoch(text: str) -> float | None:
    if text in _UNSET_TIMES:
        return None
    return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))


def limit_s(text: str) -> int | None:
    """`00:10:00`, `1-00:00:00`, `UNLIMITED`, `Partition_Limit` -> seconds or None."""
    if not text or not text[0].isdigit():
        return None
    days, _, clock = text.rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


def key_values(line: str) -> dict[str, str]:
    pairs = {}
    for token in line.split(" "):
        key, eq, value = token.partition("=")
        if eq and key not in pairs:
            pairs[key] = value
    return pairs


def _null(text: str) -> str:
    return "" if text == "(null)" else text


def _slices(nodelist: str, cpus: int, gpus_per_node: int) -> list[dict]:
    names = hostlist.expand(nodelist) if nodelist else []
    return [{"node": n, "gpus": list(range(gpus_per_node)), "cpus": cpus // len(names), "mem_mib": 0}
            for n in names]


def _array_fields(job_id_text: str | None, task_text: str | None, array_id: str | None) -> dict:
    if array_id is None:
        return {}
    fields = {"array_job_id": int(array_id)}
    if task_text and task_text.isdigit():
        fields["array_task_id"] = int(task_text)
    elif task_text:
        fields["array_task_spec"] = task_text
    return fields


def _base_job(kv: dict[str, str]) -> dict:
    user, _, uid = kv["UserId"].partition("(")
    group, _, gid = kv["GroupId"].partition("(")
    state = kv["JobState"]
    nodes = int(kv["NumNodes"].partition("-")[0])
    tasks = int(kv["NumTasks"]) if kv["NumTasks"].isdigit() else int(kv["NumCPUs"]) // int(kv["CPUs/Task"])
    gpus_per_node = int(kv["TresPerNode"].rpartition(":")[2]) if "TresPerNode" in kv else 0
    return {
        "id": int(kv["JobId"]), "name": kv["JobName"], "user": user, "uid": int(uid.rstrip(")")),
        "group": group, "gid": int(gid.rstrip(")")), "state": state, "reason": kv["Reason"],
        "partition": kv["Partition"], "priority": int(kv["Priority"]), "account": _null(kv["Account"]),
        "qos": _null(kv["QOS"]), "dependency": _null(kv["Dependency"]), "requeue": kv["Requeue"] == "1",
        "restart_count": int(kv["Restarts"]), "num_nodes": nodes, "num_tasks": tasks,
        "tasks_per_node": max(1, tasks // nodes), "cpus_per_task": int(kv["CPUs/Task"]),
        "gpus_per_node": gpus_per_node, "total_gpus": gpus_per_node * nodes,
        "held": kv["Reason"] == "JobHeldUser", "submit_host": kv["AllocNode:Sid"].partition(":")[0],
        "command": _null(kv["Command"]) or None, "workdir": kv["WorkDir"], "output": kv["StdOut"],
        "error": kv["StdErr"],
    }


def job_from_scontrol(line: str, mem_per_node_mib: int) -> dict:
    kv = key_values(line)
    job = _base_job(kv)
    running = kv["JobState"] in ("RUNNING", "COMPLETING", "SUSPENDED")
    code, _, signal = kv["ExitCode"].partition(":")
    job |= {
        "submit_time": epoch(kv["SubmitTime"]), "eligible_time": epoch(kv["EligibleTime"]),
        "start_time": epoch(kv["StartTime"]) if kv["JobState"] != "PENDING" else None,
        "end_time": None if running or kv["JobState"] == "PENDING" else epoch(kv["EndTime"]),
        "estimated_start": epoch(kv["StartTime"]) if kv["JobState"] == "PENDING" else None,
        "time_limit_s": limit_s(kv["TimeLimit"]), "nodelist": kv["NodeList"],
        "slices": _slices(kv["NodeList"], int(kv["NumCPUs"]), job["gpus_per_node"]),
        "exit_code": int(code), "exit_signal": int(signal), "mem_per_node_mib": mem_per_node_mib,
        "array_throttle": int(kv["ArrayTaskThrottle"]) if "ArrayTaskThrottle" in kv else None,
        **_array_fields(kv["JobId"], kv.get("ArrayTaskId"), kv.get("ArrayJobId")),
    }
    return job


def jobs_from_scontrol(phase: str) -> list[dict]:
    context = fixture(f"context_{phase}")
    mem = {row["JobIDRaw"]: _mem_mib(row["ReqMem"]) // max(1, int(row["NNodes"]))
           for row in sacct_rows(context["sacct"]) if "." not in row["JobIDRaw"]}
    return [job_from_scontrol(line, mem.get(key_values(line)["JobId"], 0))
            for line in context["scontrol_jobs"].splitlines() if line.strip()]


def sacct_rows(text: str) -> list[dict[str, str]]:
    header, *lines = text.splitlines()
    names = header.split("|")
    return [dict(zip(names, line.split("|"), strict=True)) for line in lines]


def _mem_mib(text: str) -> int:
    if not text:
        return 0
    factor = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}.get(text[-1], 1)
    return round(float(text.rstrip("KMGT")) * factor)


def _tres(text: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in text.split(",") if item)


def _job_from_sacct(row: dict[str, str]) -> dict:
    state, _, canceller = row["State"].partition(" by ")
    code, _, signal = row["ExitCode"].partition(":")
    nodes = int(row["NNodes"])
    nodelist = "" if row["NodeList"] == "None assigned" else row["NodeList"]
    alloc, req = _tres(row["AllocTRES"]), _tres(row["ReqTRES"])
    gpus_per_node = int(req.get("gres/gpu", 0)) // nodes
    array_id, underscore, task = row["JobID"].partition("_")
    return {
        "id": int(row["JobIDRaw"]), "name": row["JobName"], "user": row["User"], "uid": int(row["UID"]),
        "group": row["Group"], "gid": int(row["GID"]), "state": state,
        "cancelled_by_uid": int(canceller) if canceller else None, "reason": row["Reason"],
        "partition": row["Partition"], "priority": int(row["Priority"]), "account": row["Account"],
        "qos": row["QOS"], "comment": row["Comment"], "wckey": row["WCKey"], "submit_time": epoch(row["Submit"]),
        "eligible_time": epoch(row["Eligible"]), "start_time": epoch(row["Start"]), "end_time": epoch(row["End"]),
        "time_limit_s": limit_s(row["Timelimit"]), "num_nodes": nodes, "num_tasks": int(row["ReqCPUS"]),
        "cpus_per_task": 1, "tasks_per_node": max(1, int(row["ReqCPUS"]) // nodes), "gpus_per_node": gpus_per_node,
        "total_gpus": int(req.get("gres/gpu", 0)), "mem_per_node_mib": _mem_mib(row["ReqMem"]) // nodes,
        "nodelist": nodelist, "slices": _slices(nodelist, int(alloc.get("cpu", 0)), gpus_per_node),
        "exit_code": int(code), "exit_signal": int(signal), "workdir": row["WorkDir"],
        "held": row["Reason"] == "JobHeldUser" and row["Eligible"] == "Unknown", "steps": [],
        **_array_fields(row["JobID"], task.strip("[]") if underscore else None, array_id if underscore else None),
    }


def _step_from_sacct(row: dict[str, str]) -> dict:
    code, _, signal = row["ExitCode"].partition(":")
    return {"step_id": row["JobIDRaw"].partition(".")[2], "name": row["JobName"], "state": row["State"],
            "exit_code": int(code), "exit_signal": int(signal), "start_time": epoch(row["Start"]),
            "end_time": epoch(row["End"]), "nodelist": row["NodeList"], "num_tasks": int(row["NTasks"] or 1)}


def jobs_from_sacct(phase: str) -> list[dict]:
    """Job records with their steps, in the order sacct printed them."""
    jobs: list[dict] = []
    for row in sacct_rows(fixture(f"context_{phase}")["sacct"]):
        if "." in row["JobIDRaw"]:
            jobs[-1]["steps"].append(_step_from_sacct(row))
        else:
            jobs.append(_job_from_sacct(row))
    return jobs


def nodes_from_scontrol(phase: str) -> list[dict]:
    nodes = []
    for line in fixture(f"context_{phase}")["nodes"].splitlines():
        kv = key_values(line)
        alloc = _tres(kv["AllocTRES"])
        gpus = int(kv["Gres"].rpartition(":")[2]) if kv["Gres"] != "(null)" else 0
        state = {"IDLE": "idle", "MIXED": "mixed", "ALLOCATED": "allocated", "IDLE+PLANNED": "planned"}.get(
            kv["State"], kv["State"].lower())
        nodes.append({
            "name": kv["NodeName"], "state": state, "address": kv["NodeAddr"], "partitions": [kv["Partitions"]],
            "cpus": int(kv["CPUTot"]), "cpus_alloc": int(kv["CPUAlloc"]), "mem_mib": int(kv["RealMemory"]),
            "mem_alloc_mib": int(kv["AllocMem"]),
            "gpus": [{"index": i, "model": "fake", "memory_mib": 0, "domain": None, "allocated_to": None}
                     for i in range(gpus)],
            "gpus_alloc": int(alloc.get("gres/gpu", 0)), "drain_reason": "", "last_seen": epoch(kv["LastBusyTime"]),
        })
    return nodes


def partitions_from_scontrol(phase: str) -> list[dict]:
    parts = []
    for line in fixture(f"context_{phase}")["partitions"].splitlines():
        kv = key_values(line)
        parts.append({"name": kv["PartitionName"], "default": kv["Default"] == "YES", "up": kv["State"] == "UP",
                      "max_time_s": limit_s(kv["MaxTime"]), "default_time_s": limit_s(kv["DefaultTime"]),
                      "nodes": hostlist.expand(kv["Nodes"])})
    return parts
