"""Start-time forecasts (sim/forecast.py): the runtime model, forecasts of small hand-made states with known
answers, and that a forecast never changes the engine it was taken from."""
from __future__ import annotations

import pytest

from corral.api.schemas import JobSubmit
from corral.core.config import SchedulerConfig
from corral.core.model import Request
from corral.engine.config import EngineConfig, PartitionConfig
from corral.engine.records import Job, JobSpec, JobState
from corral.sim.driver import SimNode, SimSubmission, Simulation
from corral.sim.forecast import (
    HistoryQuantiles,
    OnlineWindow,
    RecentRuntimes,
    RuntimeModel,
    StartWindow,
    capture,
    censored_quantiles,
    forecast,
)


def request(user: str = "alice", gpus: int = 4, limit_s: int = 1000) -> JobSubmit:
    return JobSubmit(name="j", user=user, argv=["true"], workdir="/", nodes=1, gpus_per_node=gpus,
                     cpus_per_task=1, mem_mib=0, time_limit_s=limit_s)


def running_sim(*subs: SimSubmission, backfill: bool = True, until_s: float = 0.0) -> Simulation:
    config = EngineConfig(partitions=(PartitionConfig("gpu", default=True),),
                          scheduler=SchedulerConfig(backfill=backfill), kill_grace_s=0.0)
    sim = Simulation(config, [SimNode("n1", 4)])
    sim.submit(subs)
    sim.run(until_s=until_s)
    return sim


# ----- the runtime model

def predicted(model: RuntimeModel, user: str, limit_s: int) -> float:
    job = Job(id=1, spec=JobSpec(name="j", user=user, request=Request(time_limit_s=limit_s), argv=("true",)),
              submit_time=0.0)
    return model.runtime(job)


def test_a_user_without_history_gets_the_global_median_and_nobody_with_history_gets_the_limit():
    model = RuntimeModel(min_user_samples=2)
    assert predicted(model, "alice", 1000) == 1000  # no history at all: the limit, as backfill assumes
    for runtime in (100, 200, 900):
        model.observe("bob", runtime, 1000)
    assert predicted(model, "bob", 2000) == pytest.approx(400)  # bob's median ratio 0.2
    assert predicted(model, "alice", 2000) == pytest.approx(400)  # the global median, alice has none
    model.observe("alice", 500, 1000)
    assert predicted(model, "alice", 2000) == pytest.approx(700)  # one sample is too few: the global median 0.35
    model.observe("alice", 700, 1000)
    assert predicted(model, "alice", 2000) == pytest.approx(1200)  # alice's own median 0.6


def test_the_users_jobs_with_the_same_limit_come_first():
    model = RuntimeModel(min_user_samples=3)
    for _ in range(3):
        model.observe("alice", 100, 1000)  # her 1,000 s jobs run a tenth of it
        model.observe("alice", 3240, 3600)  # her hour-long ones nine tenths
    assert predicted(model, "alice", 1000) == pytest.approx(100)
    assert predicted(model, "alice", 3600) == pytest.approx(3240)
    assert predicted(model, "alice", 7200) == pytest.approx(3600)  # no such jobs: all of hers, median 0.5


def test_a_ratio_never_exceeds_one_and_the_recent_history_wins():
    model = RuntimeModel(per_user=2, min_user_samples=1)
    model.observe("a", 5000, 1000)  # ran past its limit (grace): counted as the limit
    assert predicted(model, "a", 100) == 100
    for runtime in (100, 100):
        model.observe("a", runtime, 1000)
    assert predicted(model, "a", 1000) == pytest.approx(100)  # the oldest sample fell out
    assert predicted(RuntimeModel.limits_only(), "a", 1000) == 1000


def test_a_running_job_past_its_prediction_is_expected_to_run_as_long_again_within_its_limit():
    sim = running_sim(SimSubmission(0, request(limit_s=10_000), 9_000))
    job = next(iter(sim.engine.jobs.values()))
    model = RuntimeModel(min_user_samples=1)
    model.observe("alice", 100, 1000)  # ratio 0.1: predicted 1,000 s
    assert model.end(job, 500) == 1000
    assert model.end(job, 3000) == 6000
    assert model.end(job, 8000) == 10_000


def test_a_running_job_is_expected_to_end_at_the_median_of_the_ratios_longer_than_its_age():
    sim = running_sim(SimSubmission(0, request(limit_s=10_000), 9_000))
    job = next(iter(sim.engine.jobs.values()))
    model = RuntimeModel(min_user_samples=1)
    for ratio in (0.1, 0.5, 0.9):
        model.observe("alice", ratio * 1000, 1000)
    assert model.end(job, 100) == pytest.approx(5000)  # every ratio is longer: their median
    assert model.end(job, 3000) == pytest.approx(7000)  # past 0.1: the median of 0.5 and 0.9
    assert model.end(job, 9500) == 10_000  # past them all: as long again, within the limit
    assert RuntimeModel.limits_only().end(job, 3000) == 10_000


def test_a_higher_quantile_predicts_longer_runtimes():
    model = RuntimeModel(min_user_samples=1, quantile=0.75)
    for ratio in (0.1, 0.5, 0.9):
        model.observe("alice", ratio * 1000, 1000)
    assert predicted(model, "alice", 1000) == pytest.approx(700)  # halfway from 0.5 to 0.9


def test_bad_model_settings_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        RuntimeModel(per_user=0)
    with pytest.raises(ValueError, match="quantile 1.5"):
        RuntimeModel(quantile=1.5)


# ----- forecasts of hand-made states

def test_fifo_queue_forecasts_each_job_after_the_predicted_ends_before_it():
    # One 4-GPU node; a running job and three waiting whole-node jobs. alice's jobs run half their limit.
    sim = running_sim(SimSubmission(0, request(limit_s=1000), 500), SimSubmission(0, request(limit_s=400), 200),
                      SimSubmission(0, request(user="bob", limit_s=600), 600),
                      SimSubmission(0, request(limit_s=800), 400))
    running, first, second, third = sorted(sim.engine.jobs)
    assert sim.engine.jobs[running].state is JobState.RUNNING
    model = RuntimeModel(min_user_samples=1)
    model.observe("alice", 50, 100)  # alice: 0.5
    model.observe("bob", 100, 100)  # bob: 1.0 (global median 0.75, unused)
    assert forecast(capture(sim.engine, 0.0), model) == {first: 500, second: 700, third: 1300}
    # Slurm's estimate: every job runs its whole limit.
    assert forecast(capture(sim.engine, 0.0), RuntimeModel.limits_only()) == {first: 1000, second: 1400,
                                                                              third: 2000}


@pytest.mark.parametrize("backfill, want_small", [(True, 100), (False, 2000)])
def test_the_forecast_plans_with_the_engines_own_policy(backfill, want_small):
    # The node: 2 GPUs free at 100, the other 2 at 1000. A 4-GPU job waits first; a 2-GPU job of limit 900
    # behind it fits in the gap from 100 with backfill, and waits its turn (after 1000 + 1000) without.
    sim = running_sim(SimSubmission(0, request(gpus=2, limit_s=100), 100),
                      SimSubmission(0, request(gpus=2, limit_s=1000), 1000),
                      SimSubmission(0, request(gpus=4, limit_s=1000), 1000),
                      SimSubmission(0, request(gpus=2, limit_s=900), 900), backfill=backfill)
    *_running, big, small = sorted(sim.engine.jobs)
    assert forecast(capture(sim.engine, 0.0), RuntimeModel.limits_only()) == {big: 1000, small: want_small}


def test_expected_arrivals_of_higher_priority_push_a_waiting_job_back():
    sim = running_sim(SimSubmission(0, request(limit_s=1000), 1000), SimSubmission(0, request(limit_s=1000), 1000))
    _running, waiting = sorted(sim.engine.jobs)
    model = RuntimeModel.limits_only()
    urgent = request(limit_s=300).model_copy(update={"priority": 100})
    assert forecast(capture(sim.engine, 0.0), model) == {waiting: 1000}
    assert forecast(capture(sim.engine, 0.0), model, arrivals=[SimSubmission(500, urgent, 300)]) == {waiting: 1300}
    assert forecast(capture(sim.engine, 0.0), model, arrivals=[SimSubmission(1500, urgent, 300)]) == {waiting: 1000}


def test_a_job_that_cannot_start_within_the_horizon_gets_no_forecast():
    sim = running_sim(SimSubmission(0, request(limit_s=1000), 1000), SimSubmission(0, request(limit_s=1000), 1000))
    _running, waiting = sorted(sim.engine.jobs)
    model = RuntimeModel.limits_only()
    assert forecast(capture(sim.engine, 0.0), model, horizon_s=999) == {}
    assert forecast(capture(sim.engine, 0.0), model, horizon_s=1000) == {waiting: 1000}


def test_a_forecast_never_changes_the_engine_it_was_taken_from():
    sim = running_sim(SimSubmission(0, request(limit_s=1000), 1000), SimSubmission(0, request(limit_s=1000), 1000),
                      SimSubmission(0, request(user="bob", limit_s=50), 50))
    before = {job_id: repr(job) for job_id, job in sim.engine.jobs.items()}
    nodes_before = repr(sim.engine.nodes)
    fairshare_before = repr(sim.engine.fairshare.state())
    state = capture(sim.engine, 0.0)
    assert len(forecast(state, RuntimeModel.limits_only())) == 2
    assert {job_id: repr(job) for job_id, job in sim.engine.jobs.items()} == before
    assert repr(sim.engine.nodes) == nodes_before
    assert repr(sim.engine.fairshare.state()) == fairshare_before
    # The captured state is reusable: the same forecast again.
    assert forecast(state, RuntimeModel.limits_only()) == forecast(state, RuntimeModel.limits_only())
    # And the live simulation goes on exactly as it would have.
    sim.run()
    assert sorted((j.id, j.start_time) for j in sim.result.finished) == [(1, 0.0), (2, 1000.0), (3, 2000.0)]


def test_a_start_window_scales_the_forecast_wait_and_always_holds_the_forecast():
    window = StartWindow(low=0.5, high=2.0, pad_s=600.0)
    assert window.bounds(1000.0, 1000.0 + 3000) == (1000.0 + 1200, 1000.0 + 6600)  # waits 3,600 x [0.5, 2] - 600
    assert window.bounds(1000.0, 1000.0) == (1000.0, 1000.0 + 600)  # "now": up to 10 min late
    assert window.bounds(1000.0, 900.0) == (900.0, 1600.0)  # an overdue forecast stays inside its window
    narrow = StartWindow(low=1.5, high=0.9)  # factors the other way round still hold the forecast
    assert narrow.bounds(0.0, 5000.0) == (5000.0, 5000.0)


def test_a_calibrated_window_holds_the_central_share_of_the_tuning_samples():
    # Actual waits 1x..10x the forecast waits (padding 0 for round numbers): the central 80 % is 1.9x..9.1x.
    samples = [(0.0, 100.0, 100.0 * k) for k in range(1, 11)]
    window = StartWindow.calibrate(samples, covered=0.8, pad_s=0.0)
    assert window is not None and (round(window.low, 3), round(window.high, 3)) == (1.9, 9.1)
    inside = [window.bounds(at, f)[0] <= actual <= window.bounds(at, f)[1] for at, f, actual in samples]
    assert inside == [True] * 9 + [False]  # 2x..9x, and 1x: the forecast itself is always inside
    assert StartWindow.calibrate([]) is None


def test_censored_quantiles_count_a_value_still_waiting_as_at_least_its_bound():
    # Started: 1, 2, 4, 8; still waiting with a bound of 3, twice. From the started ones alone the median is 2;
    # the two waiting ones are known to lie past 3, so half the mass lies past 2: Kaplan-Meier says 4.
    observed = [(1.0, True), (2.0, True), (4.0, True), (8.0, True)]
    assert censored_quantiles(observed, (0.5,)) == [2.0]
    assert censored_quantiles(observed + [(3.0, False), (3.0, False)], (0.9, 0.1, 0.5)) == [8.0, 1.0, 4.0]
    # The largest values still waiting: the upper quantiles are not known, and not claimed.
    assert censored_quantiles([(1.0, True), (1.0, True), (5.0, False), (5.0, False)], (0.5, 0.9)) == [1.0, None]
    assert censored_quantiles([], (0.5,)) == [None]


def online(**settings) -> OnlineWindow:
    return OnlineWindow(StartWindow(low=0.9, high=3.0, pad_s=0.0), **settings)


def test_an_online_window_counts_jobs_still_waiting_as_at_least_as_late_as_they_are():
    """Four jobs forecast at 0 to start at 100 started at 100, 200, 400 and 800 (ratios 1, 2, 4, 8); two
    forecast at 700 to start at 800 still wait at 1,000 (ratios at least 3)."""
    window = online(min_outcomes=1, covered=0.8, shift_power=0.0)
    for job, actual in zip((1, 2, 3, 4), (100.0, 200.0, 400.0, 800.0), strict=True):
        window.forecast(job, 0.0, 100.0)
        window.started(job, actual)
    for job in (5, 6):
        window.forecast(job, 700.0, 800.0)
    assert sorted(window.ratios(1000.0)) == [(1.0, True), (2.0, True), (3.0, False), (3.0, False), (4.0, True),
                                             (8.0, True)]
    assert window.calibrated(1000.0) == (1.0, StartWindow(1.0, 8.0, 0.0))
    # At 300 the jobs that started at 400 and 800 had not: they count as waiting then, not as what came later.
    assert sorted(window.ratios(300.0))[-2:] == [(3.0, False), (3.0, False)]
    # The median (4) shifts the forecasts by its square root here, and the window is around the shifted one.
    window.shift_power = 0.5
    shift, around = window.calibrated(1000.0)
    assert (shift, around) == (2.0, StartWindow(0.5, 4.0, 0.0))
    assert window.shifted(1000.0, 1100.0, shift) == 1200.0


def test_an_online_window_keeps_its_prior_until_enough_jobs_started_and_forgets_the_oldest():
    window = online(keep=4, min_outcomes=2, covered=0.8)
    window.forecast(1, 0.0, 100.0)
    window.forecast(2, 0.0, 100.0)
    window.started(1, 200.0)
    assert window.calibrated(1000.0) == (1.0, window.prior) and window.outcomes == 1  # one start is too few
    window.started(2, 200.0)
    shift, around = window.calibrated(1000.0)  # both came twice as late: forecasts shifted by 2 ** 0.25
    assert shift == 2 ** 0.25 and around == StartWindow(2 / shift, 2 / shift, 0.0)
    for job in (3, 4, 5):
        window.forecast(job, 500.0, 600.0)
    assert window.forecasts_of(1) == [] and window.forecasts_of(2) == [(0.0, 100.0)]  # only the newest 4
    window.dropped(3)  # cancelled: teaches nothing
    assert window.forecasts_of(3) == [] and len(window.ratios(1000.0)) == 3 and not window.knows(3)
    window.forecast(2, 300.0, 400.0)  # requeued after its start at 200, forecast again, then cancelled
    window.dropped(2)
    assert window.forecasts_of(2) == [(0.0, 100.0)]  # its start at 200 stays known


def test_an_online_window_keeps_at_most_per_job_forecasts_of_one_job_and_forgets_the_waiting_ones():
    window = online(keep=10, min_outcomes=1, per_job=2)
    for at in (0.0, 10.0, 20.0):
        window.forecast(1, at, at + 100.0)
    window.forecast(2, 0.0, 100.0)
    window.started(2, 100.0)
    assert window.forecasts_of(1) == [(10.0, 110.0), (20.0, 120.0)]
    window.forget_waiting()
    assert window.forecasts_of(1) == [] and window.ratios(500.0) == [(1.0, True)]


def test_an_online_window_counts_waits_from_the_forecast_instant_with_the_priors_pad():
    window = OnlineWindow(StartWindow(low=1.0, high=1.0, pad_s=600.0), keep=10, min_outcomes=1, shift_power=0.0)
    window.forecast(1, 1000.0, 1000.0)
    window.started(1, 1900.0)  # forecast "now", started 900 s later: (900 + 600) / (0 + 600)
    assert window.window(2000.0) == StartWindow(2.5, 2.5, 600.0)
    assert window.window(2000.0).bounds(0.0, 0.0) == (0.0, 900.0)


def test_online_window_settings_are_checked():
    prior = StartWindow(1.0, 2.0)
    for bad in ({"keep": 0}, {"min_outcomes": 0}, {"keep": 5, "min_outcomes": 6}, {"covered": 1.0},
                {"shift_power": -0.1}, {"per_job": 0}):
        with pytest.raises(ValueError):
            OnlineWindow(prior, **bad)


def test_history_quantiles_use_another_quantile_while_the_users_history_is_short():
    model = HistoryQuantiles(quantile=0.5, few=1.0, few_below=4)
    for ratio in (0.1, 0.2, 0.3):
        model.observe("alice", ratio * 1000, 1000.0)
    assert predicted(model, "alice", 1000) == pytest.approx(300.0)  # three jobs: the largest ratio (few = 1)
    model.observe("alice", 400.0, 1000.0)
    assert predicted(model, "alice", 1000) == pytest.approx(250.0)  # four: the median of 0.1-0.4
    assert predicted(model, "bob", 1000) == pytest.approx(400.0)  # no history: everyone's, at `few`
    with pytest.raises(ValueError):
        HistoryQuantiles(few=1.5)


def test_recent_runtimes_predict_the_mean_of_the_users_last_two_with_the_same_limit_first():
    model = RecentRuntimes(last=2)
    for runtime in (100.0, 300.0, 500.0):
        model.observe("alice", runtime, 1000.0)
    model.observe("alice", 50.0, 3600.0)
    assert predicted(model, "alice", 1000) == 400.0  # (300 + 500) / 2: the oldest is forgotten
    assert predicted(model, "alice", 3600) == 50.0
    assert predicted(model, "alice", 7200) == (500.0 + 50.0) / 2  # no job with that limit: the user's last two
    assert predicted(model, "alice", 200) == 200.0  # never past the limit


def test_recent_runtimes_fall_back_to_everyones_ratios_for_a_new_user():
    model = RecentRuntimes(last=2, quantile=0.5)
    assert predicted(model, "bob", 1000) == 1000.0  # nobody has finished anything: the limit
    for ratio in (0.1, 0.2, 0.3):
        model.observe("alice", ratio * 1000, 1000.0)
    assert predicted(model, "bob", 2000) == pytest.approx(400.0)  # everyone's median ratio 0.2 x 2,000


def test_recent_runtimes_end_a_running_job_at_its_prediction_or_as_the_ratios_say_once_it_outlived_it():
    model = RecentRuntimes(last=2)
    for runtime in (100.0, 300.0):
        model.observe("alice", runtime, 1000.0)
    job = Job(id=1, spec=JobSpec(name="j", user="alice", request=Request(time_limit_s=1000), argv=("true",)),
              submit_time=0.0, state=JobState.RUNNING, start_time=0.0)
    assert model.end(job, now=50.0) == 200.0
    assert model.end(job, now=250.0) == RuntimeModel.end(model, job, 250.0) == 300.0  # the ratio 0.3 is left
    with pytest.raises(ValueError):
        RecentRuntimes(last=0)


def test_a_forecast_starts_a_crashed_replica_again_and_plans_around_it():
    """A replica waiting out its restart backoff starts again in the forecast (and runs until stopped, as a
    replica does), with its service's rules: the forecast once failed with KeyError on the service's name."""
    from corral.api.services import ServiceSpec
    from tests.engine.builders import T0, engine_with_nodes, spec

    engine = engine_with_nodes(count=1, gpus=4)
    engine.apply_service(ServiceSpec(name="web", command=["serve"], replicas=1, gpus_per_node=4, workdir="/srv"), T0)
    engine.schedule(T0)
    [replica] = [job for job in engine.jobs.values() if job.spec.service]
    for node in replica.runs:
        engine.node_started(node, replica.id, T0 + 1)
    for node in list(replica.runs):
        engine.node_finished(node, replica.id, [(0, 1, 0)], None, T0 + 2)  # crashed: back after its backoff
    assert replica.state is JobState.PENDING and replica.eligible_at == T0 + 12
    waiting = engine.submit(spec(gpus=4, limit_s=600), T0 + 3)
    state = capture(engine, T0 + 3)
    assert [s.name for s in state.services] == ["web"]
    starts = forecast(state, RuntimeModel.limits_only(), horizon_s=10_000)
    assert starts.get(replica.id) is not None or starts.get(waiting.id) is not None
    assert engine.services["web"].restarts[0].count == 1, "the engine's own service is untouched"
