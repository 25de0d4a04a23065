"""`fields=` on GET /jobs and GET /accounting: rows of the named fields that hold exactly what the whole
records hold, whichever way a field is computed (projection.py), and a clear refusal of unknown names."""
from __future__ import annotations

import dataclasses

import pytest

from corral.controller.projection import JOB_FIELDS, JobFacts, Projection
from corral.engine.history import Cancelled
from corral.engine.records import JobState, NodeRun
from corral.protocol import Usage
from corral.slurm.common.http import JOB_LINE_FIELDS
from tests.controller.test_job_lists import LISTS, MIXED
from tests.store.factories import full_job, pending_job


@pytest.fixture
def api(open_controller):
    return open_controller(MIXED)


def _rows(api, path: str, params: dict, fields: tuple[str, ...]) -> list[dict]:
    reply = api.get(path, params={**params, "fields": ",".join(fields)})
    assert reply.status_code == 200, reply.text
    rows = reply.json()
    assert all(isinstance(row, list) and len(row) == len(fields) for row in rows)
    return [dict(zip(fields, row, strict=True)) for row in rows]


@pytest.mark.parametrize(("path", "base"), LISTS)
@pytest.mark.parametrize("combine", [False, True])
def test_rows_of_every_field_are_the_whole_records(api, path, base, combine) -> None:
    params = {**base, "combine_arrays": str(combine).lower()}
    whole = api.get(path, params=params).json()
    assert _rows(api, path, params, JOB_FIELDS) == whole
    some = ("state", "id", "array_task_spec", "reason")  # any order the client names
    assert _rows(api, path, params, some) == [{name: j[name] for name in some} for j in whole]


def test_rows_page_and_filter_as_records_do(api) -> None:
    fields = ("id", "user", "state")
    reply = api.get("/jobs", params={"all": "true", "user": "alice", "limit": 2, "fields": ",".join(fields)})
    assert reply.json() == [[1, "alice", "PENDING"], [3, "alice", "COMPLETED"]]
    assert reply.headers["X-Next-After"] == "3"


def _columns(api, path: str, params: dict, fields: tuple[str, ...]) -> tuple[list[dict], str | None]:
    reply = api.get(path, params={**params, "fields": ",".join(fields), "columns": "true"})
    assert reply.status_code == 200, reply.text
    columns = reply.json()["columns"]
    assert len(columns) == len(fields) and len({len(column) for column in columns}) == 1
    return [dict(zip(fields, row, strict=True)) for row in zip(*columns, strict=True)], \
        reply.headers.get("X-Next-After")


@pytest.mark.parametrize(("path", "base"), LISTS)
@pytest.mark.parametrize("combine", [False, True])
def test_columns_hold_what_rows_hold(api, path, base, combine) -> None:
    """The same records in the same order, combined arrays where their first task was, filters as rows."""
    params = {**base, "combine_arrays": str(combine).lower()}
    for fields in (JOB_FIELDS, ("state", "id", "array_task_spec", "reason")):
        assert _columns(api, path, params, fields)[0] == _rows(api, path, params, fields)
        filtered = {**params, "states": "PENDING,RUNNING", "user": "alice"}
        assert _columns(api, path, filtered, fields)[0] == _rows(api, path, filtered, fields)


@pytest.mark.parametrize(("path", "base"), LISTS)
@pytest.mark.parametrize("limit", [1, 3, 100])
def test_columns_page_as_rows_do(api, path, base, limit) -> None:
    """Page by page the same records and the same next page (an array split by a page is combined on each)."""
    fields = ("id", "state", "array_task_spec")
    params = {**base, "combine_arrays": "true"}
    after, pages = None, 0
    while True:
        paged = {**params, "limit": limit, **({"after": after} if after else {})}
        page, next_after = _columns(api, path, paged, fields)
        rows = api.get(path, params={**paged, "fields": ",".join(fields)})
        assert page == [dict(zip(fields, row, strict=True)) for row in rows.json()]
        assert next_after == rows.headers.get("X-Next-After")
        after, pages = next_after, pages + 1
        if after is None:
            break
    assert pages > 1 or limit == 100


def test_columns_need_fields(api) -> None:
    reply = api.get("/jobs", params={"columns": "true"})
    assert reply.status_code == 422
    assert reply.json()["detail"] == "columns needs fields: name the fields each column holds"
    empty = api.get("/jobs", params={"columns": "true", "fields": "id", "ids": "999999"})
    assert empty.json() == {"columns": [[]]}


def test_unknown_fields_are_refused_by_name(api) -> None:
    reply = api.get("/jobs", params={"fields": "id,nope,state,script"})
    assert reply.status_code == 422
    assert reply.json()["detail"].startswith("unknown job fields: nope, script (known: id, name,")
    reply = api.get("/accounting", params={"fields": " , "})
    assert reply.status_code == 422 and "names no field" in reply.json()["detail"]


def test_each_field_is_what_the_whole_record_says() -> None:
    """Jobs with every part set (slices, runs with usage, steps, history, a cancelling uid), a pending one
    with a forecast, place and priority, and live usage: each field alike, computed or taken from JobOut."""
    sampled = {"gpu001": NodeRun(started=True, finished=True, exit_code=3, signal=9,
                                 usage=Usage(samples=4, interval_s=30, gpus=8, cpu_s=2.5).model_dump())}
    finished = dataclasses.replace(full_job(7), runs=sampled)
    cancelled = dataclasses.replace(full_job(8), state=JobState.CANCELLED, runs=sampled,
                                    history=[Cancelled(1.0, 1234)])
    running = dataclasses.replace(full_job(9), state=JobState.RUNNING, end_time=None, runs={})
    waiting = pending_job(10)
    live = {9: {None: {"gpu001": Usage(samples=2, interval_s=30, gpus=8, gpu_idle_s=900).model_dump()}}}
    now = finished.submit_time + 50_000
    facts = JobFacts(now, 600, {10: 3}, {10: 77}.get, {10: now - 10}, lambda job: live.get(job.id))
    projection = Projection(JOB_FIELDS)
    for job in (finished, cancelled, running, waiting):
        whole = facts.job_out(job).model_dump(mode="json")
        assert projection.record(job, facts) == whole
        assert projection.row(job, facts) == [whole[name] for name in JOB_FIELDS]
    assert projection.record(cancelled, facts)["cancelled_by_uid"] == 1234
    assert projection.record(waiting, facts)["position"] == 3
    assert projection.record(waiting, facts)["priority"] == 77
    assert projection.record(waiting, facts)["estimated_start"] == now
    assert projection.record(running, facts)["gpu_idle_flagged"] is True
    cheap = Projection(JOB_LINE_FIELDS)
    assert cheap.row(running, facts) == [facts.job_out(running).model_dump(mode="json")[n] for n in JOB_LINE_FIELDS]


def test_the_clients_line_fields_are_every_field_but_the_costly_ones() -> None:
    assert set(JOB_LINE_FIELDS) == set(JOB_FIELDS) - {"steps", "history", "usage"}
    assert len(set(JOB_LINE_FIELDS)) == len(JOB_LINE_FIELDS)


def test_a_list_that_changes_while_paged_loses_and_repeats_no_job(api) -> None:
    """Pages are ranges of ids (X-Next-After): every job there from the first page to the last comes exactly
    once; one submitted meanwhile comes if its id is past the page being read (ids only grow, so it is);
    one cancelled before its page is left out, as it would be from a list asked for after."""
    fields = ("id", "state")
    params = {"combine_arrays": "false", "limit": 2}
    before = [job["id"] for job in api.get("/jobs").json()]
    first, after = _columns(api, "/jobs", params, fields)
    assert after is not None
    submitted = api.post("/jobs", json={"workdir": "/tmp", "user": "alice", "argv": ["true"]})
    assert submitted.status_code == 201, submitted.text
    new_id = submitted.json()["job_id"]
    gone = before[-1]
    assert api.post(f"/jobs/{gone}/cancel").status_code == 200
    seen = [job["id"] for job in first]
    while after is not None:
        page, after = _columns(api, "/jobs", {**params, "after": after}, fields)
        seen += [job["id"] for job in page]
    assert len(seen) == len(set(seen))  # nothing twice
    assert seen == sorted(seen)
    assert set(seen) == (set(before) - {gone}) | {new_id}


def test_columns_of_a_slice_are_each_jobs_fields() -> None:
    """Projection.columns computes some fields for a whole slice at once (no forecast: no window; no slices:
    no node list; no start: no elapsed time; no idle setting or usage: nothing flagged): every column is what
    each job's own row holds, with and without forecasts, live usage, places, priorities and the idle setting,
    over slices of one kind of job and of every kind."""
    sampled = {"gpu001": NodeRun(started=True, finished=True, exit_code=3, signal=9,
                                 usage=Usage(samples=4, interval_s=30, gpus=8, cpu_s=2.5).model_dump())}
    finished = dataclasses.replace(full_job(7), runs=sampled)
    running = dataclasses.replace(full_job(9), state=JobState.RUNNING, end_time=None, runs={})
    idle_running = dataclasses.replace(full_job(11), state=JobState.RUNNING, end_time=None, runs={})
    jobs = [finished, running, idle_running, pending_job(10), pending_job(12)]
    live = {9: {None: {"gpu001": Usage(samples=2, interval_s=30, gpus=8, gpu_idle_s=900).model_dump()}},
            11: {"gpu002": {}}}
    now = finished.submit_time + 50_000
    everything = Projection(JOB_FIELDS)
    for flag_s, places, priorities, forecasts, live_of in (
            (600, {10: 3}, {10: 77}.get, {10: now - 10}, lambda job: live.get(job.id)),
            (0, {}, {}.get, {}, lambda job: None),
            (1800, {12: 1}, {9: 5, 10: 6, 7: 1, 11: 2, 12: 3}.get, {12: now + 99}, lambda job: live.get(job.id))):
        facts = JobFacts(now, flag_s, places, priorities, forecasts, live_of)
        for chosen in (jobs, jobs[3:], jobs[1:3]):
            columns = everything.columns(chosen, facts)
            assert [list(row) for row in zip(*columns, strict=True)] == [everything.row(job, facts) for job in chosen]
