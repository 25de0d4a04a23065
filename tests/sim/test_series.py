import pytest

from corral.sim.series import StepSeries


def test_simultaneous_events_merge():
    s = StepSeries.from_events([(0, 2), (10, -2), (10, 3), (20, -3)], start_s=0, end_s=30)
    assert (s.times_s, s.values) == ((0, 10, 20), (2, 3, 0))
    assert s.integral() == 50
    assert s.mean() == pytest.approx(50 / 30)
    assert s.maximum() == 3


def test_events_outside_the_window():
    s = StepSeries.from_events([(-5, 1), (5, 1), (50, -2)], start_s=0, end_s=10)
    assert (s.times_s, s.values) == ((0, 5), (1, 2))


def test_empty_and_degenerate():
    s = StepSeries.from_events([], start_s=0, end_s=0)
    assert (s.times_s, s.values, s.mean()) == ((0,), (0,), 0)
    with pytest.raises(ValueError):
        StepSeries.from_events([], start_s=1, end_s=0)


def test_resample_keeps_the_integral():
    s = StepSeries.from_events([(t, 1 if t % 2 == 0 else -1) for t in range(100)], start_s=0, end_s=100)
    r = s.resample(10)
    assert len(r.values) == 10
    assert r.integral() == pytest.approx(s.integral())
    assert r.values == pytest.approx((0.5,) * 10)
    assert s.resample(1000) is s
