"""`corral advise`'s text: the summary (cli/advise_summary.py) as headed tables, and the what-if rows."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from corral.sim.whatif import duration

Table = tuple[Sequence[str], list[list[str]], frozenset[int]]
RIGHT = frozenset({1, 2, 3, 4, 5, 6})


def when(epoch: float) -> str:
    """A moment as `corral advise` prints it (local time, to the minute)."""
    return datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M")


def summary_lines(summary: dict[str, Any]) -> Iterator[str | Table]:
    """Lines of text and tables (headers, rows, right-aligned columns), in order."""
    period = summary["period"]
    since = when(period["since"])
    days = (period["until"] - period["since"]) / 86400
    yield (f"History since {since} ({days:.1f} days): {period['jobs']} jobs, {period['finished']} finished; "
           f"{period['gpus']} GPUs now")
    mix = summary["mix"]
    yield "\nJob mix"
    yield (("GPUS", "JOBS", "GPU-HOURS", "MEDIAN-RUNTIME"), [_mix(row) for row in mix["by_size"]], RIGHT)
    yield (("ACCOUNT", "JOBS", "GPU-HOURS", "MEDIAN-RUNTIME"), [_mix(row) for row in mix["by_account"]], RIGHT)
    yield (("QUEUE", "JOBS", "GPU-HOURS", "MEDIAN-RUNTIME"), [_mix(row) for row in mix["by_queue"]], RIGHT)
    waits = summary["waits"]
    yield "\nWaits (submission to start)"
    rows = [_waits({"name": "all", **waits["overall"]})] + [_waits(row) for row in waits["by_queue"]]
    yield (("QUEUE", "JOBS", "MEAN", "P50", "P90"), rows, RIGHT)
    yield (("GPUS", "JOBS", "MEAN", "P50", "P90"), [_waits(row) for row in waits["by_size"]], RIGHT)
    use = summary["utilisation"]
    ratio = "-" if use["ratio"] is None else f"{100 * use['ratio']:.1f} %"
    yield f"\nUtilisation: {use['gpu_hours']:.1f} of {use['capacity_gpu_hours']:.1f} GPU-hours allocated ({ratio})"
    yield from _idle(summary["idle"])
    good = summary["goodput"]
    if good["ratio"] is not None or good["unsampled_jobs"]:
        figure = "unknown" if good["ratio"] is None else f"{100 * good['ratio']:.1f} % of allocated GPU time used"
        yield (f"Goodput: {figure} ({good['sampled_jobs']} GPU job(s) sampled, {good['unsampled_jobs']} not)")
    if summary["queues"]:
        yield "\nQuota queues (GPUs; borrowed: held beyond nominal; unused: nominal quota left idle)"
        yield (("QUEUE", "COHORT", "NOMINAL", "PEAK", "GPU-HOURS", "BORROWED", "UNUSED"),
               [_queue(row) for row in summary["queues"]], frozenset({2, 3, 4, 5, 6}))


def whatif_rows(scenarios: Sequence[dict[str, Any]]) -> list[list[str]]:
    return [[f"{row['key']}: {row['title']}",
             str(row["jobs"]), _not_run(row), duration(row["mean_wait_s"]), duration(row["p90_wait_s"]),
             f"{100 * row['utilisation']:.1f} %", "-" if row["replay_s"] is None else f"{row['replay_s']:.1f} s"]
            for row in scenarios]


def _not_run(row: dict[str, Any]) -> str:
    """The replayed jobs a scenario refused or never started ("-" for what really happened)."""
    if row.get("refused") is None:
        return "-"
    return str(row["refused"] + row["unfinished"])


def _idle(idle: dict[str, Any]) -> Iterator[str | Table]:
    share = "" if idle["share_of_allocated"] is None else f" ({100 * idle['share_of_allocated']:.1f} % of allocated)"
    yield (f"Idle GPUs: {idle['idle_gpu_hours']:.1f} GPU-hours held with GPUs under 5 %{share}; "
           f"{idle['flagged_jobs']} job(s) flagged idle ({idle['flagged_gpu_hours']:.1f} GPU-hours)")
    if idle["top"]:
        yield (("JOBID", "USER", "ACCOUNT", "GPUS", "IDLE", "FLAGGED"),
               [[str(r["id"]), r["user"], r["account"], str(r["gpus"]), duration(r["idle_s"]),
                 "yes" if r["flagged"] else "no"] for r in idle["top"]], frozenset({0, 3, 4}))


def _mix(row: dict[str, Any]) -> list[str]:
    return [row["name"] or "-", str(row["jobs"]), f"{row['gpu_hours']:.1f}", duration(row["median_runtime_s"])]


def _waits(row: dict[str, Any]) -> list[str]:
    return [row["name"] or "-", str(row["jobs"])] + [
        "-" if row[key] is None else duration(row[key]) for key in ("mean_s", "p50_s", "p90_s")]


def _queue(row: dict[str, Any]) -> list[str]:
    return [row["name"], row["cohort"] or "-", f"{row['nominal_gpus']:g}", str(row["peak_gpus"]),
            f"{row['gpu_hours']:.1f}", f"{row['borrowed_gpu_hours']:.1f}", f"{row['unused_quota_gpu_hours']:.1f}"]
