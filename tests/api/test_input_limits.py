"""Issue 10's bad inputs at the REST API and the agent protocol: each is refused with 422 naming the
field and the limit, before anything changes, and the controller keeps answering."""
from __future__ import annotations

import pytest

from corral import limits

from .controller import NODE, InProcessController

TOO_BIG = 2**63


@pytest.fixture
def api(tmp_path) -> InProcessController:
    controller = InProcessController(f"sqlite:///{tmp_path / 'corral.db'}")
    assert controller.post("/agents/register", json=NODE).status_code == 200
    return controller


def refused(reply, *words: str) -> str:
    assert reply.status_code == 422, (reply.status_code, reply.text)
    detail = reply.json()["detail"]
    for word in words:
        assert word in detail, detail
    return detail


def no_jobs(api: InProcessController) -> bool:
    reply = api.get("/jobs")
    assert reply.status_code == 200, reply.text
    return reply.json() == []


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("priority", TOO_BIG, str(limits.PRIORITY_MAX)),
    ("priority", 99999999999999999999, str(limits.PRIORITY_MAX)),
    ("time_limit_s", TOO_BIG, str(limits.TIME_LIMIT_S_MAX)),
    ("uid", -1, "0"),
    ("uid", 2**64, str(limits.UID_MAX)),
    ("nodes", TOO_BIG, str(limits.COUNT_MAX)),
    ("mem_mib", TOO_BIG, str(limits.MEM_MIB_MAX)),
])
def test_numbers_past_what_can_be_stored_are_refused_before_the_engine(api, field, value, limit):
    refused(api.submit(**{field: value}), field, limit)
    assert no_jobs(api)
    assert api.submit(hold=True).status_code == 201  # the controller goes on


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e300"])
def test_begin_time_must_be_a_finite_date(api, token):
    body = '{"workdir": "/tmp", "user": "alice", "argv": ["true"], "begin_time": %s}' % token
    refused(api.post_raw("/jobs", body), "begin_time")
    assert no_jobs(api)


@pytest.mark.parametrize("field", ["name", "comment", "workdir", "user"])
def test_a_nul_byte_in_text_is_refused(api, field):
    refused(api.submit(**{field: "a\x00b"}), field, "NUL")
    assert no_jobs(api)


def test_a_lone_surrogate_in_a_name_is_refused_and_the_queue_stays_readable(api):
    body = '{"workdir": "/tmp", "user": "alice", "argv": ["true"], "name": "a\\ud800b"}'
    refused(api.post_raw("/jobs", body), "name", "surrogate")
    assert no_jobs(api)  # on main: every later GET /jobs answered 500


@pytest.mark.parametrize(("fields", "words"), [
    ({"name": "x" * 1024 * 1024}, ["name", str(limits.NAME_MAX_CHARS)]),
    ({"comment": "x" * (limits.COMMENT_MAX_CHARS + 1)}, ["comment", str(limits.COMMENT_MAX_CHARS)]),
    ({"workdir": "/" + "x" * limits.PATH_MAX_CHARS}, ["workdir", str(limits.PATH_MAX_CHARS)]),
    ({"argv": ["x" * (limits.ARG_MAX_CHARS + 1)]}, ["argv", str(limits.ARG_MAX_CHARS)]),
    ({"env": {"A=B": "c"}}, ["env", "'A=B' is not a variable name"]),
    ({"env": {f"V{i}": "x" * 1000 for i in range(3000)}}, ["env", str(limits.ENV_MAX_BYTES)]),
    ({"argv": None, "script": "#!/bin/sh\n" + "x" * limits.SCRIPT_MAX_BYTES}, ["script", str(limits.SCRIPT_MAX_BYTES)]),
])
def test_sizes_are_capped(api, fields, words):
    refused(api.submit(**fields), *words)
    assert no_jobs(api)


@pytest.mark.parametrize(("fields", "words"), [
    ({"array": f"{limits.ARRAY_INDEX_MAX + 1}"}, [str(limits.ARRAY_INDEX_MAX)]),
    ({"signal": "USR1@\u00b2"}, ["--signal time"]),
])
def test_submission_specs_with_numbers_out_of_range_are_refused(api, fields, words):
    refused(api.submit(**fields), *words)
    assert no_jobs(api)


@pytest.mark.parametrize("query", ["since=nan", "until=inf", "since=-1", "user=a%00b"])
def test_accounting_filters_are_bounded(api, query):
    refused(api.get(f"/accounting?{query}"))


@pytest.mark.parametrize(("change", "words"), [
    ({"cpus": TOO_BIG}, ["cpus"]), ({"mem_mib": 2**31}, ["mem_mib", str(limits.MEM_MIB_MAX)]),
    ({"gpus": [{"index": -1}]}, ["gpus.0.index"]),
    ({"running_jobs": [TOO_BIG]}, ["running_jobs"]),
])
def test_an_agent_registration_out_of_range_changes_nothing(tmp_path, change, words):
    api = InProcessController(f"sqlite:///{tmp_path / 'corral.db'}")
    refused(api.post("/agents/register", json={**NODE, "node": "node9", **change}), *words)
    assert api.get("/nodes").json() == []  # on main: the node stayed in memory, shown idle


@pytest.mark.parametrize("event", [
    {"kind": "finished", "job_id": 1, "tasks": [{"rank": 0, "exit_code": TOO_BIG}]},
    {"kind": "step-finished", "job_id": 1, "step_id": -1, "tasks": []},
    {"kind": "started", "job_id": TOO_BIG},
])
def test_agent_events_out_of_range_are_refused(api, event):
    epoch = api.post("/agents/register", json=NODE).json()["epoch"]
    refused(api.post("/agents/node1/events", json={"events": [event]}, headers={"X-Corral-Epoch": epoch}))


def test_an_agent_error_text_is_kept_storable_and_bounded(api):
    from corral.protocol import NodeFinished

    finished = NodeFinished(job_id=1, tasks=[], error="cannot start \x00 " + "x" * (2 * limits.COMMENT_MAX_CHARS))
    assert len(finished.error) == limits.COMMENT_MAX_CHARS and finished.error.endswith("[cut]")
    assert "\x00" not in finished.error


def test_update_is_bounded(api):
    job_id = api.submit(hold=True).json()["job_id"]
    refused(api.post(f"/jobs/{job_id}/update", json={"priority": TOO_BIG}), "priority")
    refused(api.post(f"/jobs/{job_id}/update", json={"comment": "\x00"}), "comment", "NUL")
    assert api.get(f"/jobs/{job_id}").json()["comment"] == ""


def test_tenancy_and_reservations_are_bounded(api):
    refused(api.request("PUT", "/tenancy", json={"accounts": [{"name": "a", "shares": TOO_BIG}]}), "shares")
    refused(api.request("PUT", "/tenancy", json={"priority": {"half_life_s": "Infinity"}}), "half_life_s")
    reservation = {"name": "r", "start": 0, "end": 1e300, "gpus": 1}
    refused(api.post("/reservations", json=reservation), "end")
    reservation = {"name": "r", "start": 1, "end": 2e9, "nodes": "node[1-100000000]"}
    refused(api.post("/reservations", json=reservation), str(limits.LIST_MAX_ITEMS))


def test_the_openapi_schema_documents_the_refusals_and_the_bounds(api):
    schema = api.app.openapi()
    submit = schema["components"]["schemas"]["JobSubmit"]["properties"]
    assert submit["priority"]["maximum"] == limits.PRIORITY_MAX
    assert "4XX" in schema["paths"]["/api/v1/jobs"]["post"]["responses"]


def test_a_relative_working_directory_is_refused_for_jobs_and_steps() -> None:
    from pydantic import ValidationError

    from corral.api.schemas import JobSubmit
    from corral.api.steps import StepSubmit

    for model, fields in ((JobSubmit, {"user": "alice", "argv": ["true"]}), (StepSubmit, {"argv": ["true"]})):
        with pytest.raises(ValidationError, match="must be an absolute path, not 'sub/dir'"):
            model(workdir="sub/dir", **fields)
        assert model(workdir="/scratch/sub", **fields).workdir == "/scratch/sub"
