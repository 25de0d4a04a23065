"""Job lists (GET /jobs, GET /accounting) at scale: filtered and paged by the controller, an array's
pending tasks optionally combined into one record as squeue and sacct show them, and encoded to
JSON a slice at a time, so that a 100,000-job answer never holds the event loop for long.

Unfinished jobs come from the engine, on the event loop (the loop owns them), in slices between which
other requests are served. Everything else comes from the store in a worker thread, with its own
database connection (SQLite's WAL lets it read while the controller writes)."""
from __future__ import annotations

import asyncio
import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from pydantic import TypeAdapter

from corral.api.schemas import JobOut
from corral.controller import views
from corral.engine.engine import Engine
from corral.engine.records import Job, JobState
from corral.ranges import compress_ranges
from corral.store import Store

# Where the next page starts (the `after` to ask with); absent on the last page.
NEXT_PAGE_HEADER = "X-Next-After"
_SLICE = 500  # jobs converted and encoded between two turns of the event loop (~10-20 ms)
_ENCODER = TypeAdapter(list[JobOut])

Entry = Job | list[Job]  # a list: pending tasks of one array, shown as one record


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What a job list keeps; None keeps everything."""

    states: frozenset[str] | None = None
    users: frozenset[str] | None = None
    ids: frozenset[int] | None = None
    ids_cover_arrays: bool = False  # an id in `ids` also stands for every task of that array
    partitions: frozenset[str] | None = None
    accounts: frozenset[str] | None = None

    def matches(self, job: Job) -> bool:
        spec = job.spec
        return ((self.states is None or job.state.value in self.states)
                and (self.users is None or spec.user in self.users)
                and (self.ids is None or job.id in self.ids
                     or (self.ids_cover_arrays and spec.array_job_id in self.ids))
                and (self.partitions is None or spec.request.partition in self.partitions)
                and (self.accounts is None or spec.account in self.accounts))


@dataclass(frozen=True, slots=True)
class JobQuery:
    filter: JobFilter = JobFilter()
    since: float | None = None  # stored jobs only: those that had not ended by then
    until: float | None = None  # stored jobs only: those submitted by then
    after: int | None = None  # only ids above this one
    limit: int | None = None  # at most this many jobs (a combined record counts each of its tasks)
    combine_arrays: bool = False


@dataclass(frozen=True, slots=True)
class JobList:
    body: bytes  # a JSON array of JobOut
    next_after: int | None  # where the next page starts; None: this was the last one


async def active_jobs(engine: Engine, query: JobQuery, now: float) -> JobList:
    """Unfinished jobs, with their place in the queue and scheduling priority while pending."""
    jobs, next_after = _page(engine.jobs, query)
    entries = _combined(jobs) if query.combine_arrays else jobs
    places = _positions(engine) if any(job.state is JobState.PENDING for job in jobs) else {}
    pending = engine.views.pending

    def job_out(job: Job) -> JobOut:
        out = views.job_out(job, now)
        out.position = places.get(job.id)
        view = pending.get(job.id)
        if view is not None:
            out.priority = view.priority  # the multifactor priority the scheduler uses
        return out

    parts = []
    for part in _json_slices(entries, job_out):
        parts.append(part)
        await asyncio.sleep(0)  # let other requests in between slices
    return JobList(_json_array(parts), next_after)


async def stored_jobs(engine: Engine, store: Store, query: JobQuery, now: float, *,
                      queue_facts: bool = False) -> JobList:
    """Jobs from the store, finished ones included, read and encoded in a worker thread. With
    `queue_facts`, pending jobs carry their place and priority (taken here, on the loop)."""
    places = _positions(engine) if queue_facts else {}
    priorities = {v.id: v.priority for v in engine.views.pending.values()} if queue_facts else {}
    return await asyncio.to_thread(_stored_jobs, store, query, now, places, priorities)


def _stored_jobs(store: Store, query: JobQuery, now: float, places: Mapping[int, int],
                 priorities: Mapping[int, int]) -> JobList:
    flt = query.filter
    jobs = store.query_jobs(
        ids=flt.ids, ids_cover_arrays=flt.ids_cover_arrays, users=flt.users,
        states=[JobState(s) for s in flt.states] if flt.states is not None else None,
        partitions=flt.partitions, accounts=flt.accounts, start_after=query.since, end_before=query.until,
        after_id=query.after, limit=query.limit)
    next_after = jobs[-1].id if query.limit is not None and len(jobs) == query.limit else None
    entries = _combined(jobs) if query.combine_arrays else jobs

    def job_out(job: Job) -> JobOut:
        out = views.job_out(job, now)
        out.position = places.get(job.id)
        if job.id in priorities:
            out.priority = priorities[job.id]
        return out

    return JobList(_json_array(_json_slices(entries, job_out)), next_after)


def _page(jobs: Mapping[int, Job], query: JobQuery) -> tuple[list[Job], int | None]:
    """The matching jobs by id, at most `limit` after `after`, and where the next page starts."""
    ids = sorted(jobs)
    start = 0 if query.after is None else bisect.bisect_right(ids, query.after)
    found: list[Job] = []
    for index in range(start, len(ids)):
        job = jobs[ids[index]]
        if query.filter.matches(job):
            found.append(job)
            if len(found) == query.limit:
                return found, job.id
    return found, None


def _positions(engine: Engine) -> dict[int, int]:
    """Every pending job's 1-based place in the scheduling order."""
    ordered = sorted(engine.views.pending.values(), key=lambda v: v.order)
    return {v.id: i for i, v in enumerate(ordered, 1)}


def _combined(jobs: Iterable[Job]) -> list[Entry]:
    """Pending tasks of one array (same name and partition) as one entry, where the first of them was;
    as squeue's _combine_pending_array_tasks, so the commands show the same as when they combined."""
    entries: list[Entry] = []
    groups: dict[tuple, list[Job]] = {}
    for job in jobs:
        spec = job.spec
        if job.state is not JobState.PENDING or spec.array_job_id is None:
            entries.append(job)
            continue
        key = (spec.array_job_id, spec.name, spec.request.partition)
        if key not in groups:
            groups[key] = []
            entries.append(groups[key])
        groups[key].append(job)
    return [entry[0] if isinstance(entry, list) and len(entry) == 1 else entry for entry in entries]


def _entry_out(entry: Entry, job_out: Callable[[Job], JobOut]) -> JobOut:
    if isinstance(entry, Job):
        return job_out(entry)
    first = entry[0]
    out = job_out(first)
    out.id = first.spec.array_job_id
    out.array_task_id = None
    out.reason = ",".join(dict.fromkeys(task.reason or "None" for task in entry))
    ranges = compress_ranges(task.spec.array_task_id for task in entry)
    throttle = first.spec.array_throttle
    out.array_task_spec = f"{ranges}%{throttle}" if throttle else ranges
    return out


def _json_slices(entries: list[Entry], job_out: Callable[[Job], JobOut]) -> Iterator[bytes]:
    """The array's items, comma-separated, a slice of entries at a time (pydantic's encoder holds
    the GIL for a whole call: one call for 100,000 jobs would stop every other thread)."""
    for start in range(0, len(entries), _SLICE):
        outs = [_entry_out(entry, job_out) for entry in entries[start:start + _SLICE]]
        yield _ENCODER.dump_json(outs)[1:-1]


def _json_array(parts: Iterable[bytes]) -> bytes:
    return b"[" + b",".join(parts) + b"]"
