from __future__ import annotations

from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.config import LIVE, EngineConfig
from corral.engine.engine import Engine
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec
from tests.engine.harness import Harness

T0 = 1_000.0


def inventory(gpus: int = 4, cpus: int = 16, mem_mib: int = 64_000) -> Inventory:
    return Inventory(gpus=tuple(Gpu(i) for i in range(gpus)), cpus=cpus, mem_mib=mem_mib, address="127.0.0.1")


def engine_with_nodes(count: int = 2, gpus: int = 4, **config) -> Engine:
    engine = Harness(build_engine(EngineConfig(**{"start_delay_s": 0.0, **config}), LIVE))
    for i in range(1, count + 1):
        engine.register_node(f"node{i}", inventory(gpus), set(), set(), T0)
    engine.take_dirty()
    return engine


def spec(nodes: int = 1, gpus: int = 1, limit_s: int = 600, tasks: int = 1, name: str = "job") -> JobSpec:
    req = Request(num_nodes=nodes, tasks_per_node=tasks, gpus_per_node=gpus, time_limit_s=limit_s, partition="gpu")
    return JobSpec(name=name, user="alice", request=req, argv=("true",))
