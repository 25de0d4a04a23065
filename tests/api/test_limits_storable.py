"""corral.limits are what the store can hold: a submission and a node at every limit are committed and
read back on SQLite and PostgreSQL, and one past a limit is refused before the engine changes (on
main, PostgreSQL's 32-bit columns and its text's refusal of NUL made such a commit fail with a 500
after the engine had already taken the job)."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral import limits
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

from .controller import NODE, InProcessController

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
AT_LIMITS = {
    "priority": limits.PRIORITY_MAX, "time_limit_s": limits.TIME_LIMIT_S_MAX, "uid": limits.UID_MAX,
    "begin_time": limits.TIME_MAX_S, "name": "\u00e9" * limits.NAME_MAX_CHARS,
    "comment": "\u2603" * limits.COMMENT_MAX_CHARS, "workdir": "/" + "w" * (limits.PATH_MAX_CHARS - 1),
    "hold": True,
}


@pytest.fixture(params=BACKENDS)
def api(request, tmp_path) -> Iterator[InProcessController]:
    if request.param == "sqlite":
        yield InProcessController(f"sqlite:///{tmp_path / 'corral.db'}")
        return
    with fresh_pg_schema(pg_server_url_or_skip()) as url:
        yield InProcessController(url)


def test_a_node_and_a_job_at_every_limit_are_stored_and_read_back(api):
    node = {**NODE, "cpus": limits.COUNT_MAX, "mem_mib": limits.MEM_MIB_MAX}
    assert api.post("/agents/register", json=node).status_code == 200
    reply = api.submit(**AT_LIMITS)
    assert reply.status_code == 201, reply.text
    job_id = reply.json()["job_id"]
    [stored] = api.get("/accounting", params={"ids": str(job_id)}).json()
    for field in ("priority", "time_limit_s", "uid", "name", "comment", "workdir"):
        assert stored[field] == AT_LIMITS[field], field
    [listed] = api.get("/nodes").json()
    assert (listed["cpus"], listed["mem_mib"]) == (limits.COUNT_MAX, limits.MEM_MIB_MAX)


@pytest.mark.parametrize("past", [
    {"priority": limits.PRIORITY_MAX + 1}, {"time_limit_s": limits.TIME_LIMIT_S_MAX + 1}, {"comment": "a\x00b"},
])
def test_one_past_a_limit_is_refused_and_nothing_changes(api, past):
    assert api.post("/agents/register", json=NODE).status_code == 200
    reply = api.submit(**past, hold=True)
    assert reply.status_code == 422, reply.text
    assert api.get("/jobs").json() == []
    assert api.submit(hold=True).json()["job_id"] == 1  # the refused submission took no id
