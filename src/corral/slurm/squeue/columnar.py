"""squeue's listing computed a column at a time from the controller's columns (table.JobColumns), with no
record per job: the filters, the sort keys and every field's value are taken once per distinct combination of
the fields each reads (JobColumns.values), then padded once per distinct text. It prints what squeue_output
prints from whole records, byte for byte (tests/slurm/test_squeue_columnar.py compares them); what it cannot
do that way (an array's tasks to combine or expand, steps, a field or sort key with no reads declared) it
leaves to squeue_output, by returning None."""
from __future__ import annotations

from _collections_abc import Mapping
from itertools import compress

from corral import hostlist
from corral.slurm.common import timefmt
from corral.slurm.common.formatspec import Column, column_cells, header_line
from corral.slurm.common.table import JobColumns, join_lines
from corral.slurm.squeue import select
from corral.slurm.squeue.fields import View
from corral.slurm.squeue.opts import INVALID_JOB_ID, SqueueOptions

_ARRAY_ID = ("id", "array_job_id", "array_task_id", "array_task_spec")


def columnar_output(options: SqueueOptions, jobs: JobColumns, now: float,
                    user: str | None = None) -> tuple[str, str, int] | None:
    """(stdout, stderr, exit status) as squeue_output gives them, or None when this listing needs records."""
    if options.steps is not None or not jobs.has(_ARRAY_ID) or _has_arrays(jobs):
        return None
    reads = _filter_reads(options)
    sort_keys = _sort_keys(options.sort)
    if reads is None or sort_keys is None or not jobs.has(reads):
        return None
    if any(column.field is not None and not _declared(column, jobs) for column in options.format.columns):
        return None
    if any(not jobs.has(select.SORT_READS[letter]) for letter, _ in sort_keys):
        return None
    warnings = "".join(options.warnings)
    single = options.single_job_id
    if single is not None and single not in jobs.column("id") and single not in jobs.column("array_job_id"):
        return "", warnings + INVALID_JOB_ID, 1
    sort_reads = [name for letter, _ in sort_keys for name in select.SORT_READS[letter]]
    jobs.group_by([*reads, *sort_reads])
    keep = jobs.values(_selection(options, user), reads)
    order = sorted(compress(range(len(jobs)), keep), key=jobs.column("id").__getitem__)
    for letter, descending in reversed(sort_keys):
        key = select.sort_key(letter)
        assert key is not None  # _sort_keys keeps known letters only
        ordered_keys = jobs.values(key, select.SORT_READS[letter])
        order.sort(key=ordered_keys.__getitem__, reverse=descending)  # stable, so earlier keys win
    shown = jobs if order == list(range(len(jobs))) else jobs.taken(order)
    shown.group_by([name for column in options.format.columns if column.field is not None
                    and getattr(column.field, "column", None) is None
                    for name in column.field.reads])  # type: ignore[attr-defined]
    view = View(now, options.time_format)
    head = [timefmt.ctime(view.now)] if options.long_banner else []
    if not options.noheader:
        head.append(header_line(options.format))
    cells = [_cells(column, shown, view) for column in options.format.columns]
    lines = join_lines(cells, len(shown))
    return "".join(line + "\n" for line in head) + "\n".join(lines) + ("\n" if lines else ""), warnings, 0


def _has_arrays(jobs: JobColumns) -> bool:
    """Whether any job belongs to an array (whose pending tasks squeue combines, or -r expands)."""
    column = jobs.column("array_job_id")
    return column.count(None) != len(column)


def _declared(column: Column, jobs: JobColumns) -> bool:
    reads = getattr(column.field, "reads", None)
    return reads is not None and jobs.has(reads)


def _sort_keys(spec: str) -> list[tuple[str, bool]] | None:
    """(letter, descending) of each key sort_jobs uses, in order; None when one has no reads declared."""
    keys = []
    for key in (k for k in spec.split(",") if k):
        letter = key.lstrip("+-")
        if select.sort_key(letter) is None:
            continue  # skipped by sort_jobs too
        if letter not in select.SORT_READS:
            return None
        keys.append((letter, key.startswith("-")))
    return keys


def _filter_reads(options: SqueueOptions) -> tuple[str, ...] | None:
    """The fields _selection reads with these options."""
    given = {"users": options.users is not None or options.me, "names": options.names is not None,
             "partitions": options.partitions is not None, "accounts": options.accounts is not None,
             "qos": options.qos is not None, "nodes": bool(options.nodes),
             "reservation": options.reservation is not None}
    reads = ["state", *(_ARRAY_ID if options.job_ids is not None else ())]
    reads += [name for key, names in select.FILTER_READS.items() if given[key] for name in names]
    return tuple(dict.fromkeys(reads))


def _selection(options: SqueueOptions, user: str | None):
    """Whether squeue_output keeps a job: its filters, --nodelist and --reservation, for one record."""
    users = (user,) if options.me and user else options.users
    wanted_nodes = set(hostlist.expand(options.nodes)) if options.nodes else None

    def kept(job: Mapping) -> bool:
        if not select.filter_jobs([job], job_ids=options.job_ids, job_states=options.job_states, users=users,
                                  names=options.names, partitions=options.partitions, accounts=options.accounts,
                                  qos=options.qos):
            return False
        if wanted_nodes is not None and not wanted_nodes & set(hostlist.expand(job.get("nodelist") or "")):
            return False
        return options.reservation is None or job.get("reservation") == options.reservation
    return kept


def _cells(column: Column, jobs: JobColumns, view: View) -> list[str]:
    field = column.field
    if field is None:
        return [column.suffix] * len(jobs)
    reads = field.reads  # type: ignore[attr-defined]
    fast = getattr(field, "column", None)
    texts = fast(jobs) if fast is not None else None
    if texts is None:
        value = field.value  # type: ignore[attr-defined]
        texts = jobs.values(lambda job: value(job, view), reads)
    cut = field.cut  # type: ignore[attr-defined]
    return column_cells(column, texts, jobs.values(cut, reads) if callable(cut) else cut)
