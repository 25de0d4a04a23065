"""Which jobs scancel acts on, and what it prints for ids it cannot act on (pure).

The command sends the cancellations (or signals) for the returned targets; an id that matches no
unfinished job is skipped silently unless --signal or a filter was given (then: an error line and
exit 1, as scancel's KILL_JOB_ERROR)."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral import hostlist
from corral.jobref import JobRef
from corral.slurm.common import jobids, records, states
from corral.slurm.scancel.opts import ScancelOptions, kill_job_error

_ACTIVE = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETING", "REQUEUED"})


def _passes_filters(job: Mapping, options: ScancelOptions, user: str | None) -> bool:
    checks = {
        "account": lambda j: records.get(j, "account"), "name": lambda j: j.get("name"),
        "partition": lambda j: j.get("partition"), "qos": lambda j: records.get(j, "qos"),
        "reservation": lambda j: records.get(j, "reservation"),
        "state": states.job_state, "user": lambda j: j.get("user"), "wckey": lambda j: records.get(j, "wckey"),
    }
    for key, wanted in options.filters.items():
        if key == "nodelist":
            continue  # the caller expands hostlists; see select_targets
        if checks[key](job) not in wanted and not (key == "user" and str(records.get(job, "uid")) in wanted):
            return False
    return not options.me or job.get("user") == user


def select_targets(options: ScancelOptions, jobs: Sequence[Mapping], user: str | None = None
                   ) -> tuple[list[tuple[JobRef | None, Mapping]], str, int]:
    """([(the id as written or None for filter-only, job record)], stderr, exit status)."""
    active = [j for j in jobs if states.job_state(j) in _ACTIVE and _passes_filters(j, options, user)]
    if options.filters.get("nodelist"):
        wanted = {h for expr in options.filters["nodelist"] for h in hostlist.expand(expr)}
        active = [j for j in active if wanted & set(hostlist.expand(j.get("nodelist") or ""))]
    if not options.jobs:
        return [(None, j) for j in active], "", 0
    targets: list[tuple[JobRef | None, Mapping]] = []
    errors = []
    for ref in options.jobs:
        found = [j for j in active if jobids.names(ref, j)]
        if not found and options.strict:
            errors.append(kill_job_error(ref.text))
        targets.extend((ref, j) for j in found)
    return targets, "".join(options.warnings) + "".join(errors), 1 if errors else 0
