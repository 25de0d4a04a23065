"""Pure rendering for the scheduler's policy views: priorities (sprio), fair share (sshare), quota queues,
reservations (sinfo -T) and the tenancy configuration. Input is the API's JSON (PriorityOut, FairShareOut,
QueueOut, ReservationOut, TenancySpec dicts); output is rows of text."""
from __future__ import annotations

from collections.abc import Sequence

from corral.cli.render import format_mib, format_timestamp, or_dash
from corral.jobscript.units import format_duration

Rows = list[tuple[str, ...]]

# sprio -l's columns: the priority, then each weighted factor. sprio heads both the partition's name and
# its factor PARTITION (and QOS likewise); here each column has a name of its own.
PRIO_HEADERS = ("JOBID", "USER", "ACCOUNT", "PARTITION", "QOS", "PRIORITY", "AGE", "FAIRSHARE", "JOBSIZE",
                "PARTITION_FACTOR", "QOS_FACTOR", "NICE")
PRIO_RIGHT = frozenset({0, *range(5, 12)})
SHARE_HEADERS = ("ACCOUNT", "PARENT", "SHARES", "NORMSHARES", "RAWUSAGE", "NORMUSAGE", "FAIRSHARE")
SHARE_RIGHT = frozenset(range(2, 7))
QUEUES_HEADERS = ("NAME", "COHORT", "NOMINAL", "USAGE", "BORROWING", "PENDING", "RUNNING")
QUEUES_RIGHT = frozenset({5, 6})
RESERVATION_HEADERS = ("NAME", "STATE", "START", "END", "DURATION", "NODES", "GPUS", "USERS", "ACCOUNTS", "FLAGS")
RESERVATION_RIGHT = frozenset({4, 6})
RESERVATION_STATE_COLUMN = 1


def prio_rows(items: Sequence[dict]) -> Rows:
    return [
        (str(p["job_id"]), p["user"], p["account"], p["partition"], p["qos"], str(p["priority"]), str(p["age"]),
         str(p["fairshare"]), str(p["job_size"]), str(p["partition_factor"]), str(p["qos_factor"]), str(p["nice"]))
        for p in items
    ]


def share_rows(items: Sequence[dict]) -> Rows:
    """sshare's table; accounts indented one space per level below the root, as sshare does."""
    parents = {s["account"]: s["parent"] for s in items}
    return [
        (" " * account_depth(s["account"], parents) + s["account"], or_dash(s["parent"]), str(s["shares"]),
         f"{s['norm_shares']:.6f}", f"{s['raw_usage']:.0f}", f"{s['norm_usage']:.6f}", f"{s['fairshare']:.6f}")
        for s in items
    ]


def account_depth(account: str, parents: dict[str, str | None]) -> int:
    """How many parents `account` has in `parents` (a parent missing from it counts once; loops stop)."""
    depth, seen, current = 0, {account}, parents.get(account)
    while current is not None and current not in seen:
        depth += 1
        seen.add(current)
        current = parents.get(current)
    return depth


def format_resources(amounts: dict[str, int], order: Sequence[str] = ()) -> str:
    """`gpu=8,cpu=64,mem=64G` in `order` first, then the rest; `-` when empty."""
    keys = [*(k for k in order if k in amounts), *(k for k in amounts if k not in order)]
    return ",".join(_resource(k, amounts[k]) for k in keys) or "-"


def _resource(name: str, amount: int) -> str:
    return f"mem={format_mib(amount)}" if name == "mem_mib" else f"{name}={amount}"


def queue_rows(items: Sequence[dict]) -> Rows:
    return [
        (q["name"], or_dash(q["cohort"]), format_resources(q["nominal"]),
         format_resources(q["usage"], order=list(q["nominal"])), "yes" if q["borrowing"] else "no",
         str(q["pending_jobs"]), str(q["running_jobs"]))
        for q in items
    ]


def reservation_rows(items: Sequence[dict]) -> Rows:
    from corral.hostlist import compress

    return [
        (r["name"], "ACTIVE" if r["active"] else "INACTIVE", format_timestamp(r["start"]), format_timestamp(r["end"]),
         format_duration(r["end"] - r["start"]), compress(r["node_names"]) or or_dash(r.get("nodes")),
         or_dash(r.get("gpus")), ",".join(r["users"]) or "-", ",".join(r["accounts"]) or "-",
         "MAINT" if r["maintenance"] else "-")
        for r in items
    ]


def tenancy_summary(spec: dict) -> str:
    """One line: what a tenancy configuration holds."""
    counts = [_count(len(spec.get(key, [])), word) for key, word in
              (("accounts", "account"), ("users", "user"), ("qos", "QOS"), ("queues", "queue"),
               ("limits", "limit"))]
    summary = f"{', '.join(counts)}; default QOS {spec.get('default_qos', 'normal')}"
    if spec.get("default_account"):
        summary += f"; users without an entry: account {spec['default_account']}"
    return summary


def _count(number: int, word: str) -> str:
    plural = word if number == 1 or word == "QOS" else word + "s"
    return f"{number} {plural}"


Section = tuple[str, tuple[str, ...], Rows, frozenset[int]]  # title, headers, rows, right-aligned columns


def tenancy_sections(spec: dict) -> list[Section]:
    """The non-empty parts of a TenancySpec, each as a table."""
    unlisted = spec.get("default_account")
    sections: list[Section] = [
        (f"Accounts (users without an entry: {unlisted})" if unlisted else "Accounts", ("NAME", "PARENT", "SHARES"),
         [(a["name"], or_dash(a.get("parent")), str(a["shares"])) for a in spec.get("accounts", [])],
         frozenset({2})),
        ("Users", ("NAME", "ACCOUNTS", "DEFAULT"),
         [(u["name"], ",".join(u["accounts"]), u.get("default_account") or u["accounts"][0])
          for u in spec.get("users", [])], frozenset()),
        (f"QOS (default {spec.get('default_qos', 'normal')})",
         ("NAME", "PRIORITY", "PREEMPTS", "MODE", "GRACE", "MINRUNTIME", "MAXWALL"),
         [_qos_row(q) for q in spec.get("qos", [])], frozenset({1, 4, 5, 6})),
        ("Queues", ("NAME", "COHORT", "ACCOUNTS", "NOMINAL", "BORROWLIMIT", "LENDLIMIT"),
         [_queue_spec_row(q) for q in spec.get("queues", [])], frozenset()),
        ("Limits", ("SUBJECT", "MAXRUNNING", "MAXSUBMIT", "MAXGPUS"),
         [_limit_row(lim) for lim in spec.get("limits", [])], frozenset({1, 2, 3})),
    ]
    return [section for section in sections if section[2]]


def _qos_row(qos: dict) -> tuple[str, ...]:
    max_wall_s = qos.get("max_wall_s")
    return (qos["name"], str(qos.get("priority", 0)), ",".join(qos.get("preempts", [])) or "-",
            qos.get("preempt_mode", "requeue"), format_duration(qos.get("grace_s", 0)),
            format_duration(qos.get("min_runtime_s", 0)), "-" if max_wall_s is None else format_duration(max_wall_s))


def _queue_spec_row(queue: dict) -> tuple[str, ...]:
    return (queue["name"], or_dash(queue.get("cohort")), ",".join(queue.get("accounts", [])) or "-",
            format_resources(queue["nominal"]), format_resources(queue.get("borrowing_limit", {})),
            format_resources(queue.get("lending_limit", {})))


def _limit_row(limit: dict) -> tuple[str, ...]:
    subject = f"user={limit['user']}" if limit.get("user") is not None else f"account={limit.get('account')}"
    return (subject, or_dash(limit.get("max_running_jobs")), or_dash(limit.get("max_submit_jobs")),
            or_dash(limit.get("max_gpus")))


def priority_weights_line(spec: dict) -> str:
    """`Priority: weight_age=1000 ... billing=gpu=1`: the [priority] table on one line."""
    weights = spec.get("priority", {})
    parts = [f"{k}={_number(v)}" for k, v in weights.items() if not isinstance(v, dict)]
    parts += [f"{k}={','.join(f'{r}={_number(w)}' for r, w in v.items()) or '-'}"
              for k, v in weights.items() if isinstance(v, dict)]
    return "Priority: " + " ".join(parts)


def _number(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
