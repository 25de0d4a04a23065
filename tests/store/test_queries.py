"""Reads: active jobs for a restarting controller, accounting queries, the id sequence."""
from __future__ import annotations

from dataclasses import replace

import pytest

from corral.engine.records import Job, JobState
from corral.store import ACTIVE_STATES, Store
from tests.store.factories import BASE_TIME, pending_job


def _job(job_id: int, state: JobState, user: str = "alice", partition: str = "gpu",
         submit: float = 0.0, end: float | None = None) -> Job:
    job = replace(pending_job(job_id, user=user, partition=partition, submit_offset_s=submit), state=state)
    if end is not None:
        job.start_time = BASE_TIME + submit
        job.end_time = BASE_TIME + end
    return job


@pytest.fixture
def jobs(store: Store) -> list[Job]:
    """A small history: ids 1-9, times in seconds after BASE_TIME."""
    history = [
        _job(1, JobState.COMPLETED, submit=0, end=100),
        _job(2, JobState.FAILED, user="bob", submit=10, end=50),
        _job(3, JobState.CANCELLED, partition="debug", submit=20, end=300),
        _job(4, JobState.RUNNING, submit=200),
        _job(5, JobState.PENDING, user="bob", partition="debug", submit=400),
        _job(6, JobState.COMPLETING, submit=250),
        _job(7, JobState.TIMEOUT, user="carol", submit=30, end=500),
        _job(8, JobState.NODE_FAIL, submit=600, end=700),
        _job(9, JobState.OUT_OF_MEMORY, user="bob", submit=5, end=9),
    ]
    store.save(jobs=reversed(history))  # saved out of order: reads still come back by id
    return history


def _ids(found: list[Job]) -> list[int]:
    return [job.id for job in found]


def test_active_states() -> None:
    assert set(ACTIVE_STATES) == {JobState.PENDING, JobState.RUNNING, JobState.COMPLETING}


def test_load_active_jobs(store: Store, jobs: list[Job]) -> None:
    active = store.load_active_jobs()
    assert _ids(active) == [4, 5, 6]
    assert active == [job for job in jobs if not job.state.terminal]


def test_job_leaves_active_set_when_it_ends(store: Store, jobs: list[Job]) -> None:
    finished = replace(jobs[3], state=JobState.COMPLETED, end_time=BASE_TIME + 900)
    store.save(jobs=[finished])
    assert _ids(store.load_active_jobs()) == [5, 6]


def test_max_job_id(store: Store) -> None:
    assert store.max_job_id() == 0
    store.save(jobs=[pending_job(41), pending_job(7)])
    assert store.max_job_id() == 41


def test_query_everything_in_id_order(store: Store, jobs: list[Job]) -> None:
    assert store.query_jobs() == jobs


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"ids": [3, 5, 99]}, [3, 5]),
        ({"users": ["bob"]}, [2, 5, 9]),
        ({"users": ["bob", "carol"]}, [2, 5, 7, 9]),
        ({"states": [JobState.PENDING, JobState.FAILED]}, [2, 5]),
        ({"states": ["TIMEOUT"]}, [7]),  # plain strings work too
        ({"partitions": ["debug"]}, [3, 5]),
        ({"include_active": False}, [1, 2, 3, 7, 8, 9]),
        ({"limit": 4}, [1, 2, 3, 4]),
        ({"users": ["bob"], "include_active": False, "limit": 1}, [2]),
        ({"ids": []}, []),
        ({"users": []}, []),
        ({"users": ["nobody"]}, []),
    ],
)
def test_query_filters(store: Store, jobs: list[Job], filters: dict, expected: list[int]) -> None:
    assert _ids(store.query_jobs(**filters)) == expected


@pytest.mark.parametrize(
    ("start_after_s", "end_before_s", "expected"),
    [
        # Jobs not ended by t=100 (end >= 100, or still active).
        (100, None, [1, 3, 4, 5, 6, 7, 8]),
        # Jobs submitted by t=25.
        (None, 25, [1, 2, 3, 9]),
        # Jobs that existed at some point in [260, 450].
        (260, 450, [3, 4, 5, 6, 7]),
        (10_000, None, [4, 5, 6]),
    ],
)
def test_query_time_window(store: Store, jobs: list[Job], start_after_s: float | None,
                           end_before_s: float | None, expected: list[int]) -> None:
    found = store.query_jobs(
        start_after=None if start_after_s is None else BASE_TIME + start_after_s,
        end_before=None if end_before_s is None else BASE_TIME + end_before_s,
    )
    assert _ids(found) == expected


def test_query_window_for_finished_jobs_of_a_user(store: Store, jobs: list[Job]) -> None:
    found = store.query_jobs(users=["bob"], start_after=BASE_TIME + 8, end_before=BASE_TIME + 60, include_active=False)
    assert _ids(found) == [2, 9]


def _array_task(job_id: int, array_id: int, account: str = "") -> Job:
    job = pending_job(job_id)
    return replace(job, spec=replace(job.spec, array_job_id=array_id, array_task_id=job_id - array_id,
                                     account=account))


@pytest.fixture
def arrays(store: Store) -> list[Job]:
    """Job 1 alone; array 2 (tasks 2-4, account "a"); array 5 (tasks 5-6)."""
    found = [pending_job(1)] + [_array_task(i, 2, "a") for i in (2, 3, 4)] + [_array_task(i, 5) for i in (5, 6)]
    store.save(jobs=found)
    return found


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({"ids": [2, 6]}, [2, 6]),
        ({"accounts": ["a"]}, [2, 3, 4]),
        ({"after_id": 3}, [4, 5, 6]),
        ({"after_id": 1, "limit": 2}, [2, 3]),
        ({"after_id": 6}, []),
    ],
)
def test_query_accounts_and_pages(store: Store, arrays: list[Job], filters: dict, expected: list[int]) -> None:
    assert _ids(store.query_jobs(**filters)) == expected


def test_jobs_read_together_share_their_equal_parts(store: Store) -> None:
    """As submission shares one spec's parts between an array's tasks, so does a restart: 100,000
    restored jobs with a copy each took 2.5 times the memory they had before."""
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/bob"}
    store.save(jobs=[replace(job, spec=replace(job.spec, env=dict(env), workdir="/home/bob/run", argv=("a", "b")))
                     for job in (_array_task(i, 1) for i in range(1, 5))])
    first, *others = store.load_active_jobs()
    assert first.spec.env == env
    for job in others:
        assert job.spec.env is first.spec.env and job.spec.request is first.spec.request
        assert job.spec.workdir is first.spec.workdir and job.spec.argv is first.spec.argv
    assert store.query_jobs() == store.load_active_jobs()


def test_a_window_finds_the_longest_job_and_every_unfinished_one(store: Store) -> None:
    """The window reads a range of submit_time bounded by the longest finished job (select_jobs'
    `longest_span_s`): a week-long job that ended in the window, a COMPLETING job with an end, and jobs
    still pending or running since long before are all found, page after page, as the plain filter finds them."""
    week = 7 * 86_400.0
    history = [
        _job(1, JobState.COMPLETED, submit=0, end=week + 50),  # the longest: a week, ends in the window
        _job(2, JobState.COMPLETED, submit=week, end=week + 10),  # ended before the window
        _job(3, JobState.COMPLETED, submit=week + 20, end=week + 90),
        _job(4, JobState.PENDING, submit=10),  # waiting for a week
        _job(5, JobState.RUNNING, submit=30),
        _job(6, JobState.COMPLETING, submit=week + 5, end=week + 40),
        _job(7, JobState.FAILED, submit=week + 500, end=week + 600),  # submitted after the window
    ]
    store.save(jobs=history)
    since, until = BASE_TIME + week + 30, BASE_TIME + week + 100
    expected = [1, 3, 4, 5, 6]
    assert _ids(store.query_jobs(start_after=since, end_before=until)) == expected
    assert _ids(store.query_jobs(start_after=since, end_before=until, include_active=False)) == [1, 3]
    paged, after = [], None
    while True:
        page = store.query_jobs(start_after=since, end_before=until, after_id=after, limit=2)
        paged += _ids(page)
        if len(page) < 2:
            break
        after = page[-1].id
    assert paged == expected
