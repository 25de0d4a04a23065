"""Job lists (GET /jobs, GET /accounting) at scale: filtered and paged by the controller, an array's
pending tasks optionally combined into one record as squeue and sacct show them, and encoded to
JSON a slice at a time, so that a 100,000-job answer never holds the event loop for long.

Unfinished jobs come from the engine, on the event loop (the loop owns them), with turns for other
requests between slices. Everything else is read from the store in a worker thread with its own
database connection (SQLite's WAL lets it read while the controller writes), each job encoded and
let go as it comes, so the thread never holds a whole page of decoded jobs and their JobOut copies."""
from __future__ import annotations

import asyncio
import bisect
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from operator import attrgetter

from pydantic import TypeAdapter

from corral.api.schemas import JobOut
from corral.controller.projection import JobFacts, Projection
from corral.controller.usage_views import LiveUsage
from corral.engine.engine import Engine
from corral.engine.records import Job, JobState
from corral.ranges import compress_ranges
from corral.sim.forecast import START_WINDOW, StartWindow
from corral.store import Store

# Where the next page starts (the `after` to ask with); absent on the last page.
NEXT_PAGE_HEADER = "X-Next-After"
# Jobs converted and encoded at once (~2 ms). Small, so that what a slice allocates dies before Python's
# collector promotes it: a list that outlives a few hundred allocations is promoted, and enough of those
# set off full collections over the engine's own jobs (~0.3 s each with 100,000; twice per 100,000-job read
# with slices of 500).
SLICE = 50
# Columns (`columns=true`) allocate little per job (the values are the records' own objects, gathered into a
# page's few long-lived lists), so their slices can be longer: 2,000 turns of the loop per 100,000 jobs cost
# as much as building the columns.
COLUMN_SLICE = 500
_LIST = TypeAdapter(list[JobOut])
_ARRAY_JOB_ID = attrgetter("spec.array_job_id")
# Job lists built at once (app.py); the others wait their turn. Each holds its answer while it is built,
# so this bounds the memory many clients' lists take, whatever their number.
LISTS_AT_ONCE = 4


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What a job list keeps; None keeps everything."""

    states: frozenset[str] | None = None
    users: frozenset[str] | None = None
    ids: frozenset[int] | None = None  # raw ids (an array's id is resolved to its tasks' before)
    partitions: frozenset[str] | None = None
    accounts: frozenset[str] | None = None

    def matches(self, job: Job) -> bool:
        spec = job.spec
        return ((self.states is None or job.state.value in self.states)
                and (self.users is None or spec.user in self.users)
                and (self.ids is None or job.id in self.ids)
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
    fields: tuple[str, ...] | None = None  # rows of these fields (projection.py); None: whole JobOut records
    columns: bool = False  # with `fields`: one list per field (`{"columns": [...]}`) rather than rows

    def shows(self, field_name: str) -> bool:
        """Whether the answer holds this field (so that what only it needs is not computed in vain: the
        pending jobs' places sort them all, on every page)."""
        return self.fields is None or field_name in self.fields


@dataclass(frozen=True, slots=True)
class JobList:
    body: bytes  # a JSON array of JobOut, or with `fields` of rows, or with `columns` {"columns": [...]}
    next_after: int | None  # where the next page starts; None: this was the last one
    jobs: int = 0  # the job records it encoded (what it cost)


async def active_jobs(engine: Engine, query: JobQuery, now: float, live: LiveUsage | None = None,
                      forecasts: Mapping[int, float] | None = None, window: StartWindow = START_WINDOW) -> JobList:
    """Unfinished jobs, with their place in the queue and scheduling priority while pending, their forecast
    start (`forecasts`: pending job id -> start) with its `window`, and what running ones use (`live`)."""
    jobs, next_after = _page(engine.jobs, query)
    places = _positions(engine) if query.shows("position") and any(j.state is JobState.PENDING for j in jobs) else {}
    pending = engine.views.pending

    def priority_of(job_id: int) -> int | None:
        view = pending.get(job_id)
        return None if view is None else view.priority

    facts = JobFacts(now, engine.config.gpu_idle_flag_s, places, priority_of, forecasts or {},
                     lambda job: live.of(job.id) if live is not None else None, window)
    encoding = _Encoding(facts, query.fields, query.combine_arrays, query.columns)
    for _ in encoding.add_all(jobs):
        await asyncio.sleep(0)  # let other requests in between slices
    for _ in encoding.finish():
        await asyncio.sleep(0)
    return JobList(encoding.body(), next_after, len(jobs))


async def stored_jobs(engine: Engine, store: Store, query: JobQuery, now: float, *,
                      queue_facts: bool = False, live: LiveUsage | None = None,
                      forecasts: Mapping[int, float] | None = None, window: StartWindow = START_WINDOW) -> JobList:
    """Jobs from the store, finished ones included, read and encoded in a worker thread. With
    `queue_facts`, pending jobs carry their place and priority (taken here, on the loop) and their
    forecast start (`forecasts`, with its `window`); running ones what they use (`live`, copied here)."""
    places = _positions(engine) if queue_facts and query.shows("position") else {}
    priorities = {v.id: v.priority for v in engine.views.pending.values()} if queue_facts else {}
    usage = live.snapshot() if live is not None else {}
    facts = JobFacts(now, engine.config.gpu_idle_flag_s, places, priorities.get,
                     (forecasts or {}) if queue_facts else {},
                     lambda job: None if job.state.terminal else usage.get(job.id), window)
    return await asyncio.to_thread(_stored_jobs, store, query, facts)


def _stored_jobs(store: Store, query: JobQuery, facts: JobFacts) -> JobList:
    flt = query.filter
    jobs = store.stream_listed_jobs(
        ids=flt.ids, users=flt.users,
        states=[JobState(s) for s in flt.states] if flt.states is not None else None,
        partitions=flt.partitions, accounts=flt.accounts, start_after=query.since, end_before=query.until,
        after_id=query.after, limit=query.limit)
    encoding = _Encoding(facts, query.fields, query.combine_arrays, query.columns)
    count, last_id = 0, None
    for job in jobs:
        encoding.add(job)
        count, last_id = count + 1, job.id
    for _ in encoding.finish():
        pass
    return JobList(encoding.body(), last_id if query.limit is not None and count == query.limit else None, count)


def _page(jobs: Mapping[int, Job], query: JobQuery) -> tuple[list[Job], int | None]:
    """The matching jobs by id, at most `limit` after `after`, and where the next page starts."""
    ids = sorted(jobs)
    start = 0 if query.after is None else bisect.bisect_right(ids, query.after)
    if query.filter == JobFilter():  # no filter: the page is a slice of the ids
        chosen = ids[start:] if query.limit is None else ids[start:start + query.limit]
        page = list(map(jobs.__getitem__, chosen))
        full = query.limit is not None and len(page) == query.limit  # as below: a full page says where to go on
        return page, page[-1].id if full and page else None
    matching = filter(query.filter.matches, map(jobs.__getitem__, islice(ids, start, None)))
    found = list(matching if query.limit is None else islice(matching, query.limit))
    full = query.limit is not None and len(found) == query.limit
    return found, found[-1].id if full else None


def _positions(engine: Engine) -> dict[int, int]:
    """Every pending job's 1-based place in the scheduling order."""
    ordered = sorted(engine.views.pending.values(), key=lambda v: v.order)
    return {v.id: i for i, v in enumerate(ordered, 1)}


@dataclass(slots=True)
class _Combined:
    """Pending tasks of one array, shown as one record where the first of them was."""

    first: Job
    task_ids: list[int] = field(default_factory=list)
    reasons: dict[str, None] = field(default_factory=dict)  # in order, each once


class _Encoding:
    """A job list's JSON, built as the jobs come: records are encoded a slice at a time, and with
    `combine`, an array's pending tasks (same name and partition) become one record with their ids
    in `array_task_spec`, as squeue's _combine_pending_array_tasks makes it (so the commands show
    what they showed when they combined the tasks themselves). With `fields`, each record is a row of
    those fields (projection.py); with `columns` as well, a list per field gathers every job's value (a
    combined record's place held until finish() builds it), and each is encoded at the end."""

    def __init__(self, facts: JobFacts, fields: tuple[str, ...] | None, combine: bool, columns: bool = False) -> None:
        self._facts = facts
        self._projection = Projection(fields) if fields is not None else None
        self._combine = combine
        # With `columns`: every value so far, a list per field (the few long-lived lists a page needs), and
        # where each combined record goes in them once finish() has built it.
        self._columns: list[list[object]] | None = [[] for _ in fields] if columns and fields is not None else None
        self._column_slots: list[tuple[int, _Combined]] = []
        self._parts: list[bytes | _Combined] = []
        self._slice: list[Job] = []
        self._slice_size = COLUMN_SLICE if self._columns is not None else SLICE
        self._groups: dict[tuple, _Combined] = {}

    def add(self, job: Job) -> bool:
        """Take the next job; True when a slice was just encoded (a moment to let others in)."""
        spec = job.spec
        if self._combine and job.state is JobState.PENDING and spec.array_job_id is not None:
            key = (spec.array_job_id, spec.name, spec.request.partition)
            group = self._groups.get(key)
            if group is None:
                self._flush()  # records stay in the order of their first job
                group = self._groups[key] = _Combined(job)
                self._hold_place(group)
            assert spec.array_task_id is not None  # a task of an array has its index
            group.task_ids.append(spec.array_task_id)
            group.reasons[job.reason or "None"] = None
            return False
        self._slice.append(job)
        if len(self._slice) < self._slice_size:
            return False
        self._flush()
        return True

    def add_all(self, jobs: list[Job]) -> Iterator[None]:
        """add() each job, yielding after each slice encoded. A slice with no array's pending task to combine
        is taken whole, without a call per job."""
        size = self._slice_size
        for start in range(0, len(jobs), size):
            chunk = jobs[start:start + size]
            if self._combine and list(map(_ARRAY_JOB_ID, chunk)).count(None) != len(chunk):
                if any(list(map(self.add, chunk))):
                    yield
                continue
            self._slice.extend(chunk)
            if len(self._slice) >= size:
                self._flush()
                yield

    def finish(self) -> Iterator[None]:
        """Encode what is left (the combined records), yielding after each slice."""
        self._flush()
        if self._columns is not None:
            for start in range(0, len(self._column_slots), SLICE):
                for place, group in self._column_slots[start:start + SLICE]:
                    for column, value in zip(self._columns, self._combined_record(group), strict=True):
                        column[place] = value
                yield
            return
        groups = [index for index, part in enumerate(self._parts) if isinstance(part, _Combined)]
        for start in range(0, len(groups), SLICE):
            for index in groups[start:start + SLICE]:
                part = self._parts[index]
                assert isinstance(part, _Combined)
                self._parts[index] = self._combined(part)
            yield

    def body(self) -> bytes:
        if self._columns is not None:
            return b'{"columns":[' + b",".join(_dumps(column) for column in self._columns) + b"]}"
        parts = [part for part in self._parts if isinstance(part, bytes) and part]
        assert len(parts) == sum(1 for part in self._parts if part), "finish() encodes every combined record"
        return b"[" + b",".join(parts) + b"]"

    def _flush(self) -> None:
        if not self._slice:
            return
        facts, projection = self._facts, self._projection
        if projection is None:
            # pydantic's encoder holds the GIL for a whole call: one slice, not the whole list.
            self._parts.append(_LIST.dump_json([facts.job_out(job) for job in self._slice])[1:-1])
        elif self._columns is not None:
            for column, values in zip(self._columns, projection.columns(self._slice, facts), strict=True):
                column.extend(values)
        else:
            rows = [projection.row(job, facts) for job in self._slice]
            self._parts.append(_dumps(rows)[1:-1])
        self._slice = []

    def _hold_place(self, group: _Combined) -> None:
        if self._columns is None:
            self._parts.append(group)
            return
        self._column_slots.append((len(self._columns[0]), group))
        for column in self._columns:
            column.append(None)

    def _combined(self, group: _Combined) -> bytes:
        """The group's one record, encoded."""
        if self._projection is None:
            out = self._facts.job_out(group.first)
            for name, value in self._combined_changes(group).items():
                setattr(out, name, value)
            return out.model_dump_json().encode()
        return _dumps(self._combined_record(group))

    def _combined_record(self, group: _Combined) -> list[object]:
        """The group's one row of the projection's fields."""
        assert self._projection is not None
        record = self._projection.record(group.first, self._facts) | self._combined_changes(group)
        return [record[name] for name in self._projection.fields]

    def _combined_changes(self, group: _Combined) -> dict[str, object]:
        """What tells the group's one record from its first task's, standing for them all."""
        changes: dict[str, object] = {}
        if len(group.task_ids) > 1:
            array_id = group.first.spec.array_job_id
            assert array_id is not None  # only an array's pending tasks are combined
            ranges = compress_ranges(group.task_ids)
            throttle = group.first.spec.array_throttle
            changes = {"id": array_id, "array_task_id": None, "reason": ",".join(group.reasons),
                       "array_task_spec": f"{ranges}%{throttle}" if throttle else ranges}
        return changes


def _dumps(value: object) -> bytes:
    # The json module's C encoder, compact and in UTF-8 as pydantic writes; NaN is refused, never sent.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
