"""`corral advise`'s what-ifs (sim/whatif.py): accounting records replayed under the live configuration and
its variations, and the advice they support."""
from __future__ import annotations

import pytest

from corral.sim import whatif
from tests.sim.accounting_records import HOUR, T0, live_bodies, overloaded_queue, record, two_queue_tenancy


def setup_of(bodies: dict) -> whatif.Setup:
    return whatif.live_setup(bodies["partitions"], bodies["scheduler"], bodies["tenancy"], bodies["nodes"])


def by_key(setup: whatif.Setup, jobs) -> dict[str, whatif.Variation]:
    return {v.key: v for v in whatif.variations(setup, jobs)}


def test_finished_jobs_are_resubmitted_as_they_were_asked_for_and_the_rest_is_counted():
    records = [record(3, 30, 40, 100, user="bob", account="b", queue="qb", gpus=2, limit_s=600),
               record(1, 10, 20, 50), record(2, 20, None, None, state="CANCELLED"),
               record(4, 40, 45, None)]
    jobs, notes = whatif.history_jobs(records, max_jobs=1)
    assert [j.id for j in jobs] == [3]  # the newest finished one
    assert notes == ["only the newest 1 of 2 finished jobs replayed",
                     "2 job(s) not replayed: never started, or still running"]
    job = jobs[0]
    assert (job.submit_time, job.wait_s, job.runtime_s, job.gpus, job.account) == (T0 + 30, 10, 100, 2, "b")
    request = job.request
    assert (request.user, request.account, request.queue, request.qos, request.partition) == (
        "bob", "b", "qb", "normal", "gpu")
    assert (request.nodes, request.gpus_per_node, request.cpus_per_task, request.time_limit_s) == (1, 2, 4, 600)


def test_the_live_setup_is_what_the_api_says():
    setup = setup_of(live_bodies(nodes=3, gpus=8, placement="fgd"))
    assert [(n.name, n.gpus, n.cpus, n.gpu_model) for n in setup.nodes] == [
        ("node1", 8, 32, "NVIDIA H100"), ("node2", 8, 32, "NVIDIA H100"), ("node3", 8, 32, "NVIDIA H100")]
    assert setup.partitions[0].nodes == "node[1-3]" and setup.partitions[0].default
    assert setup.scheduler.placement == "fgd" and setup.scheduler.task_mix[0][0].cpus == 4
    assert [q.name for q in setup.tenancy.queues] == ["qa", "qb"]


def test_lending_between_an_idle_and_an_overloaded_queue_is_recommended_with_its_figures():
    setup = setup_of(live_bodies())
    jobs, _ = whatif.history_jobs(overloaded_queue())
    actual = whatif.real_figures(jobs, 8)
    baseline = whatif.replay(setup, jobs)
    # The replay of the live configuration waits as the cluster did: its figures can be trusted here.
    assert baseline.figures == actual
    assert (actual.mean_wait_s, actual.utilisation) == (9.5 * HOUR, 0.5)
    lending = by_key(setup, jobs)["lending"]
    assert lending.title == "cohort lending between qa, qb"
    outcome = whatif.replay(lending.setup(setup), jobs, limits=lending.limits)
    assert (outcome.figures.mean_wait_s, outcome.figures.utilisation) == (4.5 * HOUR, 1.0)
    assert whatif.recommend(baseline, lending, outcome) == (
        "cohort lending between qa, qb: mean wait 9.5 h -> 4.5 h (53 % lower), p90 17.1 h -> 8.1 h, "
        "utilisation 50.0 % -> 100.0 %. Change: cohort = \"advise-cohort\" on every [[queues]] entry (qa, qb)")


def test_nothing_is_recommended_when_no_job_waits():
    setup = setup_of(live_bodies())
    records = [record(i + 1, i * HOUR, i * HOUR, HOUR / 2, gpus=2, limit_s=2700) for i in range(10)]
    jobs, _ = whatif.history_jobs(records)
    baseline = whatif.replay(setup, jobs)
    assert baseline.figures.mean_wait_s == 0
    variations = whatif.variations(setup, jobs)
    assert [v.key for v in variations] == ["lending", "fgd"]  # limits 1.5 x the runtime: not loose
    for variation in variations:
        outcome = whatif.replay(variation.setup(setup), jobs, limits=variation.limits)
        assert whatif.recommend(baseline, variation, outcome) is None


def test_a_small_gain_or_a_short_wait_is_no_reason_to_change():
    figures = whatif.Figures(10, 600.0, 900.0, 0.5)
    baseline = whatif.Replay(figures, 0, 0, 0.1)
    lending = by_key(setup_of(live_bodies()), [])["lending"]
    slightly = whatif.Replay(whatif.Figures(10, 500.0, 800.0, 0.5), 0, 0, 0.1)  # 17 % lower
    assert whatif.recommend(baseline, lending, slightly) is None
    much = whatif.Replay(whatif.Figures(10, 400.0, 800.0, 0.5), 0, 0, 0.1)  # 33 % lower
    assert whatif.recommend(baseline, lending, much) is not None
    stranded = whatif.Replay(whatif.Figures(9, 400.0, 800.0, 0.5), 0, 1, 0.1)  # but a job never ran
    assert whatif.recommend(baseline, lending, stranded) is None
    short = whatif.Replay(whatif.Figures(10, 50.0, 90.0, 0.5), 0, 0, 0.1)  # under MIN_WAIT_S to start with
    assert whatif.recommend(short, lending, whatif.Replay(whatif.Figures(10, 1.0, 1.0, 0.5), 0, 0, 0.1)) is None


@pytest.mark.parametrize(("cohort", "offered"), [(None, True), ("shared", False)])
def test_lending_is_tried_only_where_queues_cannot_lend_to_each_other_today(cohort, offered):
    setup = setup_of(live_bodies(tenancy=two_queue_tenancy(cohort)))
    assert ("lending" in by_key(setup, [])) is offered


def test_the_other_placement_is_tried_with_the_historys_common_shapes_as_fgds_task_mix():
    jobs, _ = whatif.history_jobs([record(1, 0, 0, 60, gpus=1), record(2, 0, 0, 60, gpus=1),
                                   record(3, 0, 0, 60, gpus=4)])
    fgd = by_key(setup_of(live_bodies()), jobs)["fgd"]
    assert fgd.change == '[scheduler] placement = "fgd", task_mix = [{gpus = 1, cpus = 4, weight = 2}, ' \
                         '{gpus = 4, cpus = 4, weight = 1}]'
    assert fgd.setup(setup_of(live_bodies())).scheduler.placement == "fgd"
    assert "bestfit" in by_key(setup_of(live_bodies(placement="fgd")), jobs)


def test_exact_limits_are_tried_when_limits_are_loose_and_replace_each_limit_by_the_runtime():
    jobs, _ = whatif.history_jobs([record(1, 0, 0, 600, limit_s=7200), record(2, 0, 0, 7100, limit_s=7200)])
    exact = by_key(setup_of(live_bodies()), jobs)["exact-limits"]
    assert exact.limits is not None and [exact.limits(j) for j in jobs] == [660, 7160]


def test_with_an_account_only_its_jobs_waits_are_counted():
    setup = setup_of(live_bodies())
    records = overloaded_queue(4) + [record(10, 0, 0, HOUR, user="bob", account="b", queue="qb")]
    jobs, _ = whatif.history_jobs(records)
    assert whatif.real_figures(jobs, 8, "b").jobs == 1 and whatif.real_figures(jobs, 8, "b").mean_wait_s == 0
    mine = whatif.replay(setup, jobs, "a").figures
    assert (mine.jobs, mine.mean_wait_s) == (4, 1.5 * HOUR)


def test_a_baseline_is_close_enough_within_half_the_real_wait_or_a_minute():
    def problem(actual_s: float, baseline_s: float) -> str | None:
        return whatif.fidelity_problem(whatif.Figures(1, actual_s, 0, 0), whatif.Figures(1, baseline_s, 0, 0))

    assert problem(1000, 1500) is None and problem(1000, 500) is None and problem(0, 60) is None
    assert problem(1000, 1501) is not None and problem(0, 61) is not None


def test_a_record_whose_request_no_submission_takes_is_left_out_and_counted():
    records = [record(1, 0, 0, 60), record(2, 0, 0, 60, gpu_share="shard:99999999")]
    jobs, notes = whatif.history_jobs(records)
    assert [j.id for j in jobs] == [1]
    assert notes == ["1 job(s) not replayed: their request is not one a submission takes"]
