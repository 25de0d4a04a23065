"""`corral advise`'s account of the cluster's own history (GET /accounting records, JobOut as JSON): job
mix, waits, GPU utilisation, idle GPUs, goodput and what each quota queue used against its nominal quota.
Pure functions of the records, the window and the capacity; nothing here talks to the controller."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from corral.cli.efficiency import goodput
from corral.sim.metrics import SIZE_BUCKETS, size_bucket
from corral.sim.whatif import quantile

Record = Mapping[str, Any]
SIZE_ORDER = [name for name, _ in SIZE_BUCKETS]
TOP_IDLE = 5  # the idle jobs listed by name
HOUR = 3600.0


def size_of(record: Record) -> str:
    """The job's size bucket by total GPUs, as the simulator's reports group jobs."""
    return size_bucket(record["total_gpus"])


def queue_of(record: Record) -> str:
    """The quota queue a job was charged to, else its partition."""
    return record.get("queue") or record["partition"]


def summarize(records: Sequence[Record], since: float, until: float, capacity_gpus: int,
              queues: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """What the records say about the window [since, until] on a cluster of `capacity_gpus` GPUs. `queues`:
    the tenancy's quota queues (GET /tenancy's `queues`)."""
    finished = [r for r in records if r.get("end_time") is not None and r.get("start_time") is not None]
    held_s = sum(_held_in(r, since, until) for r in records)
    capacity_s = capacity_gpus * max(0.0, until - since)
    used, held, sampled, unsampled = goodput(records)
    return {
        "period": {"since": since, "until": until, "jobs": len(records), "finished": len(finished),
                   "gpus": capacity_gpus},
        "mix": {"by_size": _groups(finished, size_of, _mix_row, order=SIZE_ORDER),
                "by_account": _groups(finished, lambda r: r.get("account") or "", _mix_row),
                "by_queue": _groups(finished, queue_of, _mix_row)},
        "waits": {"overall": wait_figures(records),
                  "by_queue": _groups(records, queue_of, wait_figures),
                  "by_size": _groups(records, size_of, wait_figures, order=SIZE_ORDER)},
        "utilisation": {"gpu_hours": round(held_s / HOUR, 2), "capacity_gpu_hours": round(capacity_s / HOUR, 2),
                        "ratio": round(held_s / capacity_s, 4) if capacity_s else None},
        "idle": idle_figures(records, held_s),
        "goodput": {"ratio": round(used / held, 4) if held else None, "sampled_jobs": sampled,
                    "unsampled_jobs": unsampled},
        "queues": [queue_use(q, records, since, until) for q in queues],
    }


def wait_figures(records: Iterable[Record]) -> dict[str, Any]:
    waits = [r["start_time"] - r["submit_time"] for r in records if r.get("start_time") is not None]
    return {"jobs": len(waits), "mean_s": round(sum(waits) / len(waits), 1) if waits else None,
            "p50_s": round(quantile(waits, 0.5), 1) if waits else None,
            "p90_s": round(quantile(waits, 0.9), 1) if waits else None}


def _mix_row(records: Sequence[Record]) -> dict[str, Any]:
    runtimes = [r["end_time"] - r["start_time"] for r in records]
    return {"jobs": len(records), "gpu_hours": round(sum(float(r["gpu_seconds"]) for r in records) / HOUR, 2),
            "median_runtime_s": round(quantile(runtimes, 0.5), 1)}


def _groups(records: Iterable[Record], key: Callable[[Record], str], row: Callable[[list[Record]], dict],
            order: Sequence[str] | None = None) -> list[dict[str, Any]]:
    groups: dict[str, list[Record]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    names = [n for n in order if n in groups] if order is not None else sorted(groups)
    return [{"name": name, **row(groups[name])} for name in names]


def idle_figures(records: Sequence[Record], held_s: float) -> dict[str, Any]:
    """The GPU-seconds jobs held while their GPUs stayed idle (under 5 %, their last stretch as the agents
    counted it), the jobs the controller flagged (gpu_idle_flag_s), and the worst of them."""
    rows = []
    for r in records:
        usage = r.get("usage") or {}
        if not usage.get("gpus") or not r["total_gpus"]:
            continue
        idle_s = min(float(usage["gpu_idle_s"]), float(r.get("elapsed_s") or 0.0))
        rows.append((idle_s * r["total_gpus"], idle_s, r))
    rows.sort(key=lambda row: (-row[0], row[2]["id"]))
    idle_gpu_s = sum(row[0] for row in rows)
    flagged = [row for row in rows if row[2].get("gpu_idle_flagged")]
    return {
        "idle_gpu_hours": round(idle_gpu_s / HOUR, 2),
        "share_of_allocated": round(idle_gpu_s / held_s, 4) if held_s else None,
        "flagged_jobs": len(flagged), "flagged_gpu_hours": round(sum(row[0] for row in flagged) / HOUR, 2),
        "top": [{"id": r["id"], "user": r["user"], "account": r.get("account", ""), "gpus": r["total_gpus"],
                 "idle_s": round(idle_s), "flagged": bool(r.get("gpu_idle_flagged"))}
                for gpu_s, idle_s, r in rows[:TOP_IDLE] if gpu_s > 0],
    }


def queue_use(queue: Mapping[str, Any], records: Iterable[Record], since: float, until: float) -> dict[str, Any]:
    """A quota queue's GPUs over the window against its nominal quota: GPU-hours held beyond it (borrowed
    from its cohort) and nominal quota left unused (what it could have lent), from its jobs' run times."""
    nominal = float(queue["nominal"].get("gpu", 0))
    changes: list[tuple[float, int]] = []
    for r in records:
        if queue_of(r) != queue["name"] or r.get("start_time") is None:
            continue
        start, end = max(r["start_time"], since), min(r["end_time"] if r.get("end_time") is not None else until, until)
        if end > start:
            changes += [(start, r["total_gpus"]), (end, -r["total_gpus"])]
    changes.sort()
    borrowed = unused = held = 0.0
    peak = gpus = 0
    at = since
    for when, delta in changes:
        span = when - at
        held += gpus * span
        borrowed += max(0.0, gpus - nominal) * span
        unused += max(0.0, nominal - gpus) * span
        gpus += delta
        peak = max(peak, gpus)
        at = when
    unused += nominal * max(0.0, until - at)
    return {"name": queue["name"], "cohort": queue.get("cohort"), "nominal_gpus": nominal,
            "borrowing_limit_gpus": queue.get("borrowing_limit", {}).get("gpu"),
            "lending_limit_gpus": queue.get("lending_limit", {}).get("gpu"),
            "gpu_hours": round(held / HOUR, 2), "peak_gpus": peak,
            "borrowed_gpu_hours": round(borrowed / HOUR, 2), "unused_quota_gpu_hours": round(unused / HOUR, 2)}


def _held_in(record: Record, since: float, until: float) -> float:
    """GPU-seconds the job held within [since, until] (its last run)."""
    if record.get("start_time") is None:
        return 0.0
    end = record["end_time"] if record.get("end_time") is not None else until
    return record["total_gpus"] * max(0.0, min(end, until) - max(record["start_time"], since))
