"""GET /jobs and GET /accounting filter, page and combine on the controller exactly as a client doing it
on the whole list would."""
from __future__ import annotations

import pytest

from corral.engine.records import JobState
from corral.slurm.squeue.select import combine_pending_array_tasks
from tests.controller.conftest import T0, job

PD, R, CG = JobState.PENDING, JobState.RUNNING, JobState.COMPLETING
MIXED = [
    job(1, PD, user="alice", account="a"),
    job(2, R, user="bob", account="b"),
    job(3, JobState.COMPLETED, user="alice"),
    job(4, JobState.FAILED, user="bob", partition="debug", account="b"),
    job(5, JobState.CANCELLED, user="carol"),
    job(6, CG, user="alice", partition="debug"),
    job(7, PD, user="bob", account="b"),
    # An array of five: its first task runs, the others wait (two reasons).
    job(10, R, user="alice", array=(10, 0)),
    job(11, PD, user="alice", array=(10, 1)),
    job(12, PD, user="alice", array=(10, 2), reason="Resources"),
    job(13, PD, user="alice", array=(10, 3)),
    job(14, PD, user="alice", array=(10, 4)),
    # Another user's array in another partition, and a task renamed on its own.
    job(20, PD, user="bob", partition="debug", account="b", array=(20, 0)),
    job(21, PD, user="bob", partition="debug", account="b", array=(20, 1)),
    job(22, PD, user="bob", partition="debug", account="b", array=(20, 2), name="other"),
    job(30, PD, user="carol", partition="debug", account="c"),
]

FILTERS = [
    ({"states": "RUNNING"}, lambda j: j["state"] == "RUNNING"),
    ({"states": "pending,COMPLETING"}, lambda j: j["state"] in ("PENDING", "COMPLETING")),
    ({"user": "bob"}, lambda j: j["user"] == "bob"),
    ({"user": "bob,carol"}, lambda j: j["user"] in ("bob", "carol")),
    ({"ids": "2,20"}, lambda j: j["id"] in (2, 20) or j["array_job_id"] in (2, 20)),
    ({"partitions": "debug"}, lambda j: j["partition"] == "debug"),
    ({"accounts": "b,c"}, lambda j: j["account"] in ("b", "c")),
    ({"states": "PENDING", "user": "bob", "partitions": "debug"},
     lambda j: j["state"] == "PENDING" and j["user"] == "bob" and j["partition"] == "debug"),
]


def _pages(api, path: str, params: dict, limit: int) -> list[dict]:
    """Every page of a paged list, following X-Next-After."""
    found, after = [], None
    while True:
        reply = api.get(path, params={**params, "limit": limit, **({"after": after} if after is not None else {})})
        assert reply.status_code == 200, reply.text
        page = reply.json()
        assert len(page) <= limit
        found += page
        after = reply.headers.get("X-Next-After")
        if after is None:
            return found


@pytest.fixture
def api(open_controller):
    return open_controller(MIXED)


@pytest.mark.parametrize(("params", "keep"), FILTERS)
def test_active_jobs_filtered_on_the_controller(api, params, keep) -> None:
    everything = api.get("/jobs").json()
    assert {j["id"] for j in everything} == {j.id for j in MIXED if not j.state.terminal}
    assert api.get("/jobs", params=params).json() == [j for j in everything if keep(j)]


@pytest.mark.parametrize(("params", "keep"), FILTERS)
def test_all_jobs_filtered_in_the_database(api, params, keep) -> None:
    everything = api.get("/jobs", params={"all": "true"}).json()
    assert [j["id"] for j in everything] == [j.id for j in MIXED]
    assert api.get("/jobs", params={"all": "true", **params}).json() == [j for j in everything if keep(j)]


@pytest.mark.parametrize(("params", "keep"), FILTERS)
def test_accounting_filtered_in_the_database(api, params, keep) -> None:
    window = {"since": T0 + 5.5, "until": T0 + 25}  # job 3 ended at +5, job 30 was submitted at +30
    everything = api.get("/accounting", params=window).json()
    assert [j["id"] for j in everything] == [j.id for j in MIXED if j.id not in (3, 30)]
    assert api.get("/accounting", params={**window, **params}).json() == [j for j in everything if keep(j)]


LISTS = [("/jobs", {}), ("/jobs", {"all": "true"}), ("/accounting", {})]


@pytest.mark.parametrize(("path", "base"), LISTS)
@pytest.mark.parametrize("limit", [1, 3, 100])
def test_pages_hold_every_job_once(api, path, base, limit) -> None:
    everything = api.get(path, params=base).json()
    assert _pages(api, path, base, limit) == everything
    pending = [j for j in everything if j["state"] == "PENDING"]
    assert _pages(api, path, {**base, "states": "PENDING"}, limit) == pending


@pytest.mark.parametrize("limit", [1, 3, 5, 100])
def test_unfiltered_pages_are_the_pages_of_a_filter_that_keeps_every_job(api, limit) -> None:
    """An unfiltered page is sliced out of the ids (no filter checked per job): the same jobs and the same
    X-Next-After, page by page, as a filter that keeps every unfinished job (a full last page included)."""
    every_state = {"states": "PENDING,RUNNING,COMPLETING"}

    def headers_and_pages(params: dict) -> list[tuple[str | None, list[int]]]:
        found, after = [], None
        while True:
            reply = api.get("/jobs", params={**params, "limit": limit, **({"after": after} if after else {})})
            after = reply.headers.get("X-Next-After")
            found.append((after, [j["id"] for j in reply.json()]))
            if after is None:
                return found

    unfiltered = headers_and_pages({})
    assert unfiltered == headers_and_pages(every_state)
    assert sum(len(ids) for _, ids in unfiltered) == sum(1 for j in MIXED if not j.state.terminal)


def test_a_bad_page_or_filter_is_refused(api) -> None:
    assert api.get("/jobs", params={"limit": 0}).status_code == 422
    assert api.get("/accounting", params={"after": -1}).status_code == 422
    reply = api.get("/jobs", params={"ids": "2,x"})
    assert reply.status_code == 422 and reply.json()["detail"].startswith("ids: ")
    assert "unknown job state(s): NOPE" in api.get("/accounting", params={"states": "nope"}).json()["detail"]


@pytest.mark.parametrize(("path", "base"), LISTS)
def test_combined_arrays_are_what_squeue_and_sacct_make_of_the_tasks(api, path, base) -> None:
    everything = api.get(path, params=base).json()
    combined = api.get(path, params={**base, "combine_arrays": "true"}).json()
    assert combined == combine_pending_array_tasks(everything)
    remainder = next(r for r in combined if r["id"] == 10 and r["state"] == "PENDING")
    assert remainder["array_task_spec"] == "1-4" and remainder["reason"] == "Priority,Resources"
    # Split over pages, the pieces combine into the same records again.
    assert combine_pending_array_tasks(_pages(api, path, {**base, "combine_arrays": "true"}, 2)) == combined
