"""The openb/FGD experiment: arrivals through the core's placement give sane allocation ratios."""
from __future__ import annotations

from dataclasses import replace

import pytest

from corral.sim import openb_experiment as ox
from corral.sim.traces import fgd


def test_best_fit_on_the_golden_order(openb_nodes, openb_pods):
    run = ox.run_seed(openb_nodes, openb_pods, fgd.GOLDEN_SEED, "bestfit")
    assert run.arrivals == 10_866 and "golden" in run.method
    assert 85.0 < run.alloc_ratio_100 <= run.alloc_ratio_130 <= 100.0
    assert run.curve[50] == pytest.approx(50.0, abs=0.5)  # everything fits at half load


@pytest.mark.parametrize("policy", ["fgd", "fgd+cpu"])
def test_fgd_on_a_small_cluster(openb_nodes, openb_pods, policy):
    small = replace(openb_nodes, nodes=openb_nodes.nodes[:120])
    run = ox.run_seed(small, openb_pods, 43, policy)
    assert "PCG64" in run.method
    assert 80.0 < run.alloc_ratio_100 <= run.alloc_ratio_130 <= 100.0
    assert 0 < run.placed < run.arrivals


def test_typical_mix_and_seeds(openb_pods):
    mix = ox.typical_mix(openb_pods.jobs)
    assert sum(w for _, w in mix) == pytest.approx(1.0)
    assert all(s.gpus > 0 for s, _ in mix)  # weighted by GPU demand: CPU-only shapes weigh nothing
    authors = ox.typical_mix(openb_pods.jobs, coverage=0.95, weight="count")
    assert len(authors) == 35 and any(s.gpus == 0 for s, _ in authors)
    assert ox.parse_seeds("42-44,50") == [42, 43, 44, 50]
    with pytest.raises(ValueError, match="unknown openb policy"):
        ox.run_seed(None, openb_pods, 42, "worstfit")
