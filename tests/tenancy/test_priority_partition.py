"""The partition factor (Slurm's PriorityJobFactor): a per-partition integer, normalized by the largest over
all partitions, weighted by weight_partition."""
from __future__ import annotations

import pytest

from corral.api.tenancy import TenancySpec
from corral.controller.settings import SettingsError, settings_from_dict
from corral.controller.tenancy_views import priorities
from corral.controller.views import partition_outs
from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.config import SIMULATED, EngineConfig, PartitionConfig
from corral.engine.engine import Engine
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec
from corral.slurm.sprio.opts import parse_sprio
from corral.slurm.sprio.output import sprio_output
from tests.engine.harness import Harness

T0 = 1000.0
PARTITION_ONLY = {"weight_age": 0, "weight_fairshare": 0, "weight_partition": 10_000}


def engine(*partitions: PartitionConfig, priority: dict = PARTITION_ONLY) -> Engine:
    e = Harness(build_engine(EngineConfig(partitions=partitions), SIMULATED, tenancy=TenancySpec(priority=priority)))
    e.register_node("n1", Inventory(tuple(Gpu(i) for i in range(8)), 64, 512_000, "127.0.0.1"), set(), set(), T0)
    return e


def spec(partition: str) -> JobSpec:
    return JobSpec(name="j", user="u", request=Request(gpus_per_node=1, time_limit_s=60, partition=partition),
                   argv=("true",))


def test_a_job_in_a_high_factor_partition_outranks_an_equal_job_elsewhere() -> None:
    e = engine(PartitionConfig("batch", default=True, priority_job_factor=1),
               PartitionConfig("interactive", priority_job_factor=4))
    low, high = e.submit(spec("batch"), T0), e.submit(spec("interactive"), T0)
    factors = e.views.factors
    assert factors[high.id].partition == 10_000, "the largest factor normalizes to 1.0"
    assert factors[low.id].partition == 2_500, "1/4 of the largest"
    assert e.views.pending[high.id].priority > e.views.pending[low.id].priority
    rows = [p.model_dump() for p in priorities(e)]
    assert [(r["job_id"], r["partition_factor"]) for r in rows] == [(high.id, 10_000), (low.id, 2_500)]
    stdout, _, _ = sprio_output(parse_sprio(["-o", "%.6i %.12r %.10P"], {}), rows, PARTITION_ONLY)
    assert stdout.split("\n")[1:3] == [f"{low.id:>6}        batch       2500", f"{high.id:>6}  interactive      10000"]


def test_equal_factors_give_every_partition_the_full_weight() -> None:
    # As Slurm's default PriorityJobFactor=1 everywhere: each partition is at the maximum.
    e = engine(PartitionConfig("a", default=True), PartitionConfig("b"))
    jobs = [e.submit(spec("a"), T0), e.submit(spec("b"), T0)]
    assert [e.views.factors[j.id].partition for j in jobs] == [10_000, 10_000]


def test_all_factors_zero_give_no_partition_priority() -> None:
    e = engine(PartitionConfig("a", default=True, priority_job_factor=0), PartitionConfig("b", priority_job_factor=0))
    job = e.submit(spec("b"), T0)
    assert e.views.factors[job.id].partition == 0


def test_the_config_file_sets_it_and_the_api_shows_it() -> None:
    config = settings_from_dict({"partitions": [{"name": "gpu", "default": True},
                                                {"name": "debug", "priority_job_factor": 10}]})
    assert [p.priority_job_factor for p in config.partitions] == [1, 10]
    assert [p.priority_job_factor for p in partition_outs(config, [])] == [1, 10]
    with pytest.raises(SettingsError, match="priority_job_factor"):
        settings_from_dict({"partitions": [{"name": "gpu", "priority_job_factor": -1}]})
