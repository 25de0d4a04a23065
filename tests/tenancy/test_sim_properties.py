"""Properties over simulated time, through the production engine: reclaim within one grace period, and
no starvation of a large gang under a stream of small jobs."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.api.schemas import JobSubmit
from corral.api.tenancy import TenancySpec
from corral.core.quota import QuotaBook
from corral.engine.config import EngineConfig
from corral.engine.records import JobState
from corral.sim.driver import SimNode, SimSubmission, Simulation

GRACE_S = 30.0


def _spec(user: str, account: str, queue: str, gpus: int, limit_s: int, nodes: int = 1, qos: str = "normal",
          ) -> JobSubmit:
    return JobSubmit(name="j", user=user, argv=["true"], workdir="/", nodes=nodes, gpus_per_node=gpus,
                     time_limit_s=limit_s, partition="gpu", account=account, qos=qos, queue=queue or None)


@settings(max_examples=25, deadline=None)
@given(borrower_jobs=st.integers(2, 8), claim_gpus=st.sampled_from([1, 2, 4, 8]), arrive_s=st.integers(60, 3000))
def test_a_queue_gets_its_nominal_quota_back_within_one_grace_period(borrower_jobs, claim_gpus, arrive_s) -> None:
    tenancy = TenancySpec(
        accounts=[{"name": "a"}, {"name": "b"}],
        users=[{"name": "alice", "accounts": ["a"]}, {"name": "bob", "accounts": ["b"]}],
        qos=[{"name": "normal", "grace_s": GRACE_S}],
        queues=[{"name": "qa", "cohort": "c", "accounts": ["a"], "nominal": {"gpu": 8}},
                {"name": "qb", "cohort": "c", "accounts": ["b"], "nominal": {"gpu": 8}}])
    sim = Simulation(EngineConfig(), [SimNode("n1", 8), SimNode("n2", 8)], tenancy, stop_delay_s=GRACE_S)
    hog = [SimSubmission(0.0, _spec("bob", "b", "qb", 8 if i < 2 else 4, 86400), 86400.0) for i in range(borrower_jobs)]
    demand = [SimSubmission(float(arrive_s), _spec("alice", "a", "qa", claim_gpus, 3600), 3600.0)
              for _ in range(8 // claim_gpus)]
    sim.submit(hog + demand)
    sim.run(until_s=arrive_s + GRACE_S)
    book = QuotaBook(sim.engine.tenancy.queues, sim.engine.views.running.values())
    running_a = [j for j in sim.engine.jobs.values() if j.spec.queue == "qa" and j.state is JobState.RUNNING]
    assert book.usage["qa"]["gpu"] == 8 and len(running_a) == 8 // claim_gpus


@settings(max_examples=25, deadline=None)
@given(stream=st.lists(st.tuples(st.integers(0, 1800), st.integers(60, 1200)), min_size=5, max_size=60),
       gang_at=st.integers(0, 600))
def test_a_large_gang_starts_by_its_estimated_time_under_a_stream_of_small_jobs(stream, gang_at) -> None:
    sim = Simulation(EngineConfig(), [SimNode(f"n{i}", 8) for i in range(4)], stop_delay_s=0.0)
    smalls = [SimSubmission(float(at), _spec("u", "default", "", 2, duration), float(duration))
              for at, duration in stream]
    gang = SimSubmission(float(gang_at), _spec("u", "default", "", 8, 3600, nodes=4), 3600.0)
    sim.submit([gang] + smalls)
    promised: list[float] = []

    def watch(now: float) -> None:
        job = sim.engine.jobs.get(sim.result.ids.get(0))
        if job is not None and job.estimated_start is not None and not promised:
            promised.append(job.estimated_start)

    sim.run(on_progress=watch)
    gang_job = next(j for j in sim.result.finished if j.id == sim.result.ids[0])
    start = gang_job.history[0].run_start if gang_job.history else gang_job.start_time
    if promised:
        assert start <= promised[0] + 1e-6, "the gang's reservation was delayed by later small jobs"
