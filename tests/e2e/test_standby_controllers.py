"""Two controllers on one PostgreSQL database: one leads, the other stands by, answering 421 with the leader's
URL; when the leader dies or is cut off (SIGSTOP), the standby takes over within 5 s, rebuilds from the
database and the agents' jobs run on; the old leader, continued, can write nothing and stands by."""
from __future__ import annotations

import contextlib
import signal
import time

import pytest

from tests.e2e.harness import API, wait_for
from tests.e2e.standby import StandbyCluster
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

pytestmark = pytest.mark.slow

TAKEOVER_LIMIT_S = 5.0


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def standby_cluster(request, tmp_path):
    """Controllers on a fresh PostgreSQL schema (or, where a test asks, one SQLite file on this host)."""
    made: list[StandbyCluster] = []
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'corral.db'}"
        else:
            url = stack.enter_context(fresh_pg_schema(pg_server_url_or_skip()))

        def make(**kwargs) -> StandbyCluster:
            cluster = StandbyCluster(tmp_path, db=url, **kwargs)
            made.append(cluster)
            return cluster.start()

        yield make
        for cluster in made:
            cluster.stop()


def takeover_s(cluster: StandbyCluster, old: int, since: float) -> float:
    """Seconds from `since` until another controller leads and answers the API."""
    def led() -> bool:
        new = cluster.leader()
        return new is not None and new != old and cluster.direct[new].get(f"{API}/jobs").status_code == 200

    wait_for(led, 15, 0.02, message="a new leader")
    return time.monotonic() - since


def test_a_standby_answers_421_naming_the_leader_and_both_say_who_leads(standby_cluster) -> None:
    cluster = standby_cluster(nodes=1, gpus=1)
    leader = cluster.leader()
    standby = 1 - leader
    refused = cluster.direct[standby].get(f"{API}/jobs")
    assert refused.status_code == 421, refused.text
    assert refused.json() == {"detail": f"not the leader: the leader is {cluster.url_of(leader)}",
                              "leader": cluster.url_of(leader)}
    assert refused.headers["X-Corral-Leader"] == cluster.url_of(leader)
    assert cluster.direct[standby].post(f"{API}/jobs", json={}).status_code == 421
    assert cluster.direct[standby].get(f"{API}/health").status_code == 200
    for index in (leader, standby):
        status = cluster.status(index)
        assert status["role"] == ("leader" if index == leader else "standby")
        assert status["url"] == cluster.url_of(index) and status["pid"] == cluster.procs[index].pid
        assert status["leader"] == cluster.url_of(leader) and status["epoch"] == 1
        assert sorted((c["url"], c["role"], c["pid"]) for c in status["controllers"]) == sorted(
            (cluster.url_of(i), "leader" if i == leader else "standby", cluster.procs[i].pid) for i in (0, 1))


@pytest.mark.parametrize("standby_cluster", [pytest.param("postgres", marks=pytest.mark.postgres), "sqlite"],
                         indirect=True)
def test_the_leader_killed_the_standby_takes_over_and_the_running_job_completes(standby_cluster) -> None:
    cluster = standby_cluster(nodes=1, gpus=2)
    running = cluster.submit(argv=["sleep", "6"], gpus=1, time_limit_s=120)
    cluster.wait_state(running, "RUNNING")
    old = cluster.leader()
    cluster.signal(old, signal.SIGKILL)
    took = takeover_s(cluster, old, time.monotonic())
    assert took < TAKEOVER_LIMIT_S, f"takeover took {took:.2f} s\n{cluster.logs()}"
    new = cluster.leader()
    assert cluster.status(new)["epoch"] == 2
    after = cluster.submit(argv=["true"], gpus=1)
    assert after == running + 1, "job ids continue from the database"
    assert cluster.wait_state(running, "COMPLETED", "NODE_FAIL", "FAILED", timeout_s=40)["state"] == "COMPLETED"
    assert cluster.wait_state(after, "COMPLETED", "FAILED", timeout_s=30)["state"] == "COMPLETED"
    print(f"takeover after SIGKILL: {took:.2f} s")


def test_a_paused_leader_is_replaced_and_when_continued_can_write_nothing(standby_cluster) -> None:
    cluster = standby_cluster(nodes=1, gpus=2)
    running = cluster.submit(argv=["sleep", "8"], gpus=1, time_limit_s=120)
    cluster.wait_state(running, "RUNNING")
    old = cluster.leader()
    cluster.signal(old, signal.SIGSTOP)  # cut off: it neither renews its lease nor knows it
    try:
        took = takeover_s(cluster, old, time.monotonic())
        assert took < TAKEOVER_LIMIT_S, f"takeover took {took:.2f} s\n{cluster.logs()}"
        new = cluster.leader()
        during = cluster.submit(argv=["true"], gpus=1)
        cluster.wait_state(during, "COMPLETED")
    finally:
        cluster.signal(old, signal.SIGCONT)
    # The old leader, continued, may still believe it leads for an instant: whatever it does, its commit is
    # refused (the lease moved on) and it stands by.
    stale = cluster.direct[old].post(f"{API}/jobs", json={"workdir": str(cluster.root), "user": "tester",
                                                          "argv": ["true"]})
    assert stale.status_code == 421, stale.text
    assert stale.json()["leader"] in (None, cluster.url_of(new))  # None: it stopped before learning who leads
    wait_for(lambda: (cluster.status(old) or {}).get("leader") == cluster.url_of(new), 5,
             message="the old leader stands by, naming the new one")
    assert cluster.status(old)["role"] == "standby"
    assert cluster.direct[old].get(f"{API}/jobs").headers["X-Corral-Leader"] == cluster.url_of(new)
    assert "stops leading" in cluster.log_of(old)
    assert cluster.wait_state(running, "COMPLETED", "NODE_FAIL", "FAILED", timeout_s=40)["state"] == "COMPLETED"
    ids = [job["id"] for job in cluster.http.get(f"{API}/accounting").json()]
    assert ids == [running, during], "the old leader's refused submission left nothing"
    assert cluster.leader() == new and cluster.status(new)["epoch"] == 2
    assert cluster.http.get(f"{API}/jobs/{during + 1}").status_code == 404
    print(f"takeover after SIGSTOP: {took:.2f} s")
