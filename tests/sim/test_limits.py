import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral.sim.limits import DAY_S, HOUR_S, MINUTE_S, TimeLimitModel, human_duration
from corral.sim.workload import Workload

from .builders import job


def _workload(*durations_s):
    return Workload(tuple(job(i, submit_s=i, duration_s=d) for i, d in enumerate(durations_s)), "w", "test")


def test_limits_are_round_values_at_least_the_runtime():
    model = TimeLimitModel(over_estimate=(1.0, 1.0))  # no padding: pure rounding
    limits = [j.time_limit_s for j in model.apply(_workload(0, 1, 900, 901, 3600, 5 * HOUR_S, 3 * DAY_S)).jobs]
    assert limits == [15 * MINUTE_S, 15 * MINUTE_S, 15 * MINUTE_S, HOUR_S, HOUR_S, 12 * HOUR_S, 7 * DAY_S]


def test_over_estimate_factor_multiplies_before_rounding():
    model = TimeLimitModel(over_estimate=(3.0, 3.0))
    assert model.limit_s(1000, 3.0) == HOUR_S  # 3000 s -> next round value is 1 h
    assert model.limit_s(1500, 3.0) == 4 * HOUR_S  # 4500 s -> 4 h
    assert model.limit_s(2 * HOUR_S, 3.0) == 12 * HOUR_S


def test_cap_never_cuts_below_the_runtime():
    model = TimeLimitModel(over_estimate=(2.0, 2.0), cap_s=DAY_S)
    assert model.limit_s(10 * HOUR_S, 2.0) == DAY_S  # 20 h -> 1 d, at the cap
    assert model.limit_s(30 * HOUR_S, 2.0) == 30 * HOUR_S  # longer than the cap: exactly its runtime
    assert model.limit_s(30 * HOUR_S + 0.5, 2.0) == 30 * HOUR_S + 1


def test_beyond_the_largest_step_rounds_to_its_multiples():
    model = TimeLimitModel(round_up_to_s=(HOUR_S, DAY_S), cap_s=None)
    assert model.round_up(DAY_S + 1) == 2 * DAY_S
    assert TimeLimitModel(round_up_to_s=(), cap_s=None).round_up(12.2) == 13


def test_deterministic_per_seed_and_different_across_seeds():
    w = _workload(*range(100, 10_000, 37))
    a = TimeLimitModel(seed=3, round_up_to_s=()).apply(w)
    b = TimeLimitModel(seed=3, round_up_to_s=()).apply(w)
    c = TimeLimitModel(seed=4, round_up_to_s=()).apply(w)
    assert [j.time_limit_s for j in a.jobs] == [j.time_limit_s for j in b.jobs]
    assert [j.time_limit_s for j in a.jobs] != [j.time_limit_s for j in c.jobs]
    assert a.notes[-1] == TimeLimitModel(seed=3, round_up_to_s=()).describe()


def test_known_limits_are_kept_and_do_not_shift_other_draws():
    plain = _workload(100, 200, 300)
    with_known = Workload((job(0, duration_s=100), job(1, submit_s=1, duration_s=200, time_limit_s=999),
                           job(2, submit_s=2, duration_s=300)), "w", "test")
    model = TimeLimitModel(round_up_to_s=())
    limits = [j.time_limit_s for j in model.apply(with_known).jobs]
    assert limits[1] == 999
    assert [limits[0], limits[2]] == [j.time_limit_s for j in model.apply(plain).jobs][0::2]


@pytest.mark.parametrize("kwargs", [{"over_estimate": (0.5, 2.0)}, {"over_estimate": (3.0, 2.0)},
                                    {"round_up_to_s": (0, 60)}, {"cap_s": 0}])
def test_invalid_models(kwargs):
    with pytest.raises(ValueError):
        TimeLimitModel(**kwargs)


@settings(max_examples=60, deadline=None)
@given(durations=st.lists(st.floats(min_value=0, max_value=60 * DAY_S), min_size=1, max_size=20),
       low=st.floats(min_value=1.0, max_value=5.0), spread=st.floats(min_value=0.0, max_value=5.0),
       seed=st.integers(min_value=0, max_value=2**32))
def test_every_limit_covers_its_runtime(durations, low, spread, seed):
    model = TimeLimitModel(over_estimate=(low, low + spread), seed=seed)
    for j in model.apply(_workload(*durations)).jobs:
        assert j.time_limit_s >= j.duration_s
        assert j.time_limit_s in model.round_up_to_s or j.time_limit_s >= model.cap_s


def test_describe_mentions_the_parameters():
    text = TimeLimitModel(over_estimate=(1.5, 4.0), seed=11, cap_s=2 * DAY_S).describe()
    for fragment in ("[1.5, 4]", "seed 11", "15 min, 1 h, 4 h, 12 h, 1 d, 2 d, 7 d", "capped at 2 d"):
        assert fragment in text


@pytest.mark.parametrize("seconds, text", [(0, "0 s"), (45, "45 s"), (900, "15 min"), (5400, "1 h 30 min"),
                                           (7 * DAY_S, "7 d"), (DAY_S + 61, "1 d 1 min")])
def test_human_duration(seconds, text):
    assert human_duration(seconds) == text
