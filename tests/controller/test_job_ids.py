"""Job ids at the API, on the real controller (live.py): path ids are a job's own id in ASCII digits
within what the database stores (422 otherwise, never a 500); `ids=` lists and dependencies take
Slurm's forms. pydantic's int, like Python's, reads "1_5" and "15.0" as 15."""
from __future__ import annotations

import pytest

from tests.controller.live import live_controller

BAD_PATH_IDS = ["1_5", "15.0", "+15", "%2015", "15%20", "%D9%A1%D9%A5", "0", "-1", "1e3", "0x10",
                "9223372036854775808", "99999999999999999999999"]


@pytest.fixture
def live(tmp_path):
    """Array 1 (tasks 0-9: ids 1-10), then plain jobs 11 to 15."""
    with live_controller(tmp_path) as controller:
        assert controller.submit(array="0-9")["task_ids"] == list(range(1, 11))
        assert [controller.submit()["job_id"] for _ in range(5)] == [11, 12, 13, 14, 15]
        yield controller


def test_path_ids_that_are_no_job_id_are_refused_and_touch_nothing(live):
    for bad in BAD_PATH_IDS:
        for method, path in (("GET", ""), ("POST", "/cancel"), ("POST", "/hold"), ("POST", "/release"),
                             ("POST", "/requeue"), ("POST", "/signal?signal=10"), ("GET", "/steps/0"),
                             ("POST", "/complete")):
            reply = live.http.request(method, f"/jobs/{bad}{path}", json={} if method == "POST" else None)
            assert reply.status_code == 422, (bad, path, reply.text)
            assert reply.json()["detail"].startswith("job_id: invalid job id"), reply.text
    assert set(live.states().values()) == {"PENDING"}
    assert not any(live.job(i)["held"] for i in range(1, 16))


def test_an_array_task_in_the_path_says_where_its_id_is(live):
    reply = live.http.post("/jobs/1_5/cancel")
    assert reply.status_code == 422
    assert "GET /jobs?ids=N_I finds it" in reply.json()["detail"]


def test_unknown_ids_in_range_are_404(live):
    assert live.http.get("/jobs/9223372036854775807").status_code == 404
    assert live.http.post("/jobs/9223372036854775807/cancel").status_code == 404


@pytest.mark.parametrize("step", ["9223372036854775808", "-1", "1_0", "\u0661"])
def test_step_ids_out_of_range_are_422(live, step):
    reply = live.http.get(f"/jobs/1/steps/{step}")
    assert reply.status_code == 422, reply.text
    assert reply.json()["detail"].startswith("step_id: invalid step id")


@pytest.mark.parametrize("path", ["/jobs", "/accounting"])
def test_ids_lists_take_slurms_forms(live, path):
    def ids(text):
        reply = live.http.get(path, params={"ids": text, "all": "true"})
        assert reply.status_code == 200, reply.text
        return [j["id"] for j in reply.json()]

    assert ids("1_5") == [6]  # int("1_5") would be 15
    assert ids("1") == list(range(1, 11))
    assert ids("1_[0-1,9],15") == [1, 2, 10, 15]
    assert ids("3") == [3]  # a task's own id is that task
    assert ids("3_1") == [] and ids("15_0") == [] and ids("1_10") == [] and ids("99") == []


@pytest.mark.parametrize("bad", ["1_5_3", "15__2", "+3", " 3", "0x10", "1e3", "\u0663", "-1", "0", "1.batch",
                                 "9223372036854775808"])
def test_ids_lists_refuse_what_is_no_id(live, bad):
    reply = live.http.get("/accounting", params={"ids": f"12,{bad}"})
    assert reply.status_code == 422
    assert reply.json()["detail"].startswith(f"ids: invalid job id {bad!r}")


def test_dependencies_name_tasks_of_the_array_only(live):
    job = live.submit(dependency="afterok:1_5")["job_id"]
    assert live.job(job)["dependency"] == "afterok:6"
    job = live.submit(dependency="afterany:1")["job_id"]
    assert live.job(job)["dependency"] == "afterany:" + ":".join(str(i) for i in range(1, 11))
    for dependency, detail in (
        ("afterok:3_1", "job dependency problem: job 3 is not an array (it is task 2 of array 1)"),
        ("afterok:1_10", "job dependency problem: array 1 has no task 10"),
        ("afterok:\u0661", "invalid job id '\u0661': expected N or N_I (ASCII digits only) in dependency"),
        ("afterok:1_5_3", "invalid job id '1_5_3': expected N or N_I (ASCII digits only) in dependency"),
        ("afterok:9223372036854775808", "invalid job id '9223372036854775808': job ids go up to 9223372036854775807"),
    ):
        reply = live.http.post("/jobs", json={"workdir": str(live.workdir), "user": "alice", "argv": ["true"],
                                              "dependency": dependency})
        assert reply.status_code == 422, reply.text
        assert detail in reply.json()["detail"], reply.text
    assert max(live.states()) == 17
