"""The job-size factor by requested GPU time, favouring small jobs (Slurm's PriorityFavorSmall with the size
measured as GPUs x time limit): what the user asked for, never the runtime it will turn out to have."""
from __future__ import annotations

from corral.api.tenancy import TenancySpec
from corral.controller.settings import tenancy_from_dict
from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.commands import Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.engine import Engine
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec
from tests.engine.harness import Harness

T0 = 1000.0
SMALL_FIRST = {"weight_age": 0, "weight_fairshare": 0, "weight_job_size": 100_000, "job_size_basis": "gpu_time",
               "favor_small": True}


def engine(priority: dict) -> Engine:
    e = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=TenancySpec(priority=priority)))
    e.register_node("n1", Inventory(tuple(Gpu(i) for i in range(8)), 64, 512_000, "127.0.0.1"), set(), set(), T0)
    return e


def spec(gpus: int, limit_s: int) -> JobSpec:
    return JobSpec(name="j", user="u", request=Request(gpus_per_node=gpus, time_limit_s=limit_s, partition="gpu"),
                   argv=("true",))


def test_the_smallest_requested_gpu_time_goes_first() -> None:
    e = engine(SMALL_FIRST)
    blocker = e.submit(spec(8, 600), T0)
    e.schedule(T0)
    long_one = e.submit(spec(4, 86400), T0 + 1)   # 4 GPU-days asked
    wide_one = e.submit(spec(8, 3600), T0 + 2)    # 8 GPU-hours
    short_one = e.submit(spec(2, 1800), T0 + 3)   # 1 GPU-hour
    e.schedule(T0 + 4)
    prio = [e.views.pending[j.id].priority for j in (short_one, wide_one, long_one)]
    assert prio[0] > prio[1] > prio[2] > 0
    e.node_finished("n1", blocker.id, [(0, 0, 0)], None, T0 + 600)
    started = [c.job_id for c in e.schedule(T0 + 600) if isinstance(c, Launch)]
    assert started == [short_one.id], "the 8-GPU job is next and holds the reservation the long one would delay"
    assert wide_one.estimated_start == T0 + 600 + 1800


def test_default_is_unchanged_larger_gpu_counts_score_higher() -> None:
    e = engine({"weight_age": 0, "weight_fairshare": 0, "weight_job_size": 1000})
    e.register_node("n2", Inventory(tuple(Gpu(i) for i in range(8)), 64, 512_000, "127.0.0.1"), set(), set(), T0)
    small, big = e.submit(spec(1, 60), T0), e.submit(spec(8, 60), T0)
    assert e.views.pending[big.id].priority > e.views.pending[small.id].priority


def test_the_controller_config_file_enables_it() -> None:
    tenancy = tenancy_from_dict({"priority": {**SMALL_FIRST}}, "corral.toml")
    assert tenancy.priority.job_size_basis == "gpu_time" and tenancy.priority.favor_small
