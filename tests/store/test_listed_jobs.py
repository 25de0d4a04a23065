"""Store.stream_listed_jobs: the jobs a listing reads, each spec a view of its stored JSON (codec.SpecView),
read field for field as the JobSpec that stream_jobs decodes."""
from __future__ import annotations

from dataclasses import fields, replace

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import update

from corral.engine.records import Job, JobSpec, JobState
from corral.store import Store, StoreError
from corral.store.codec import SpecView
from corral.store.schema import JOBS
from tests.store.factories import BASE_TIME, full_job, pending_job
from tests.store.test_roundtrip import _jobs


def _assert_reads_as(listed: Job, job: Job) -> None:
    """`listed` holds every field of `job`, its spec's included, read as attributes."""
    assert isinstance(listed.spec, SpecView)
    for spec_field in fields(JobSpec):
        assert getattr(listed.spec, spec_field.name) == getattr(job.spec, spec_field.name), spec_field.name
    assert listed.spec.kind == job.spec.kind
    assert replace(listed, spec=job.spec) == job


def test_listed_jobs_read_as_the_saved_ones(store: Store) -> None:
    saved = [full_job(1), pending_job(2), full_job(3, user="bob")]
    store.save(jobs=saved)
    listed = list(store.stream_listed_jobs())
    assert [job.id for job in listed] == [1, 2, 3]
    for job, original in zip(listed, saved, strict=True):
        _assert_reads_as(job, original)


def test_listed_jobs_take_the_filters_and_the_window(store: Store) -> None:
    finished = [replace(full_job(i, user="alice" if i % 2 else "bob"), submit_time=BASE_TIME + i,
                        start_time=BASE_TIME + i + 1, end_time=BASE_TIME + i + 10, state=JobState.COMPLETED)
                for i in range(1, 9)]
    store.save(jobs=finished)
    window = {"users": ["alice"], "start_after": BASE_TIME + 13, "end_before": BASE_TIME + 7, "limit": 2}
    listed = list(store.stream_listed_jobs(**window))
    assert [job.id for job in listed] == [job.id for job in store.stream_jobs(**window)] == [3, 5]


def test_a_spec_stored_without_newer_fields_reads_their_defaults(store: Store) -> None:
    # A row written before JobSpec had these fields: the view falls back on JobSpec's defaults, as
    # spec_from_json does (each left-out field holds a value that is not its default in full_job).
    job = full_job(4)
    store.save(jobs=[job])
    left_out = ("comment", "wckey", "gpu_share", "array_throttle", "env", "exclusive")
    with store.engine.begin() as connection:
        spec = connection.execute(JOBS.select().where(JOBS.c.id == 4)).one().spec
        connection.execute(update(JOBS).where(JOBS.c.id == 4).values(
            spec={name: value for name, value in spec.items() if name not in left_out}))
    decoded = store.get_job(4)
    assert decoded is not None
    defaults = JobSpec(name="x", user="x", request=job.spec.request)
    for name in left_out:
        assert getattr(job.spec, name) != getattr(defaults, name), name
        assert getattr(decoded.spec, name) == getattr(defaults, name), name
    (listed,) = store.stream_listed_jobs(ids=[4])
    _assert_reads_as(listed, decoded)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=_jobs)
def test_any_listed_job_reads_as_the_saved_one(module_store: Store, job: Job) -> None:
    module_store.save(jobs=[job])
    (listed,) = module_store.stream_listed_jobs(ids=[job.id])
    _assert_reads_as(listed, job)


def test_a_listing_read_in_part_leaves_the_store_usable(store: Store) -> None:
    # More rows than PostgreSQL sends at once (store._STREAM_ROWS): a reader that stops after the first job
    # cancels the rest (on PostgreSQL a streamed query is cancelled and its connection returned clean).
    saved = [replace(full_job(i), submit_time=BASE_TIME + i, start_time=BASE_TIME + i + 1,
                     end_time=BASE_TIME + i + 5, state=JobState.COMPLETED) for i in range(1, 251)]
    store.save(jobs=saved)
    window = {"start_after": BASE_TIME + 3, "end_before": BASE_TIME + 300}
    partial = store.stream_listed_jobs(**window)
    assert next(partial).id == 1  # ended at BASE_TIME + 6, after the window's start
    partial.close()
    for _ in range(3):  # every pooled connection is usable again
        listed = list(store.stream_listed_jobs(**window))
        assert [job.id for job in listed] == [job.id for job in store.stream_jobs(**window)] == list(range(1, 251))
    _assert_reads_as(listed[-1], saved[-1])
    store.save(jobs=[replace(saved[0], reason="written after")])
    assert store.get_job(1).reason == "written after"  # type: ignore[union-attr]


def test_a_spec_field_postgresql_cannot_read_as_its_type_is_a_store_error(store: Store) -> None:
    # PostgreSQL reads a spec's int fields as integers (store/listed.py): a row whose spec holds something
    # else (written by hand: the codec writes ints) is refused with the database's reason, never read as
    # another value. SQLite hands the decoded JSON over as it is.
    store.save(jobs=[full_job(5)])
    with store.engine.begin() as connection:
        spec = connection.execute(JOBS.select().where(JOBS.c.id == 5)).one().spec
        connection.execute(update(JOBS).where(JOBS.c.id == 5).values(spec={**spec, "priority": 1.5}))
    if store.engine.dialect.name != "postgresql":
        (listed,) = store.stream_listed_jobs(ids=[5])
        assert listed.spec.priority == 1.5
        return
    with pytest.raises(StoreError, match="reading failed: .*bigint.*1.5"):
        list(store.stream_listed_jobs(ids=[5]))
    store.save(jobs=[full_job(6)])
    (other,) = store.stream_listed_jobs(ids=[6])  # the connection the error came on is usable again
    _assert_reads_as(other, full_job(6))
