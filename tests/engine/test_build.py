"""The engine's profiles (config.LIVE, config.SIMULATED), resolved where it is built (build.py)."""
from __future__ import annotations

from corral.controller.settings import settings_from_dict
from corral.engine.build import build_engine
from corral.engine.commands import Launch
from corral.engine.config import LIVE, SIMULATED, EngineConfig, EngineProfile
from tests.engine.builders import T0, inventory, spec
from tests.engine.harness import Harness


def one_node(config: EngineConfig, profile: EngineProfile) -> Harness:
    engine = Harness(build_engine(config, profile))
    engine.register_node("node1", inventory(), set(), set(), T0)
    return engine


def test_simulated_nodes_never_go_silent_and_jobs_start_at_once() -> None:
    engine = one_node(EngineConfig(node_timeout_s=30, start_delay_s=0.3), SIMULATED)
    job = engine.submit(spec(), T0)
    assert engine.schedule(T0) == [Launch(job.id, "node1")], "no start delay"
    assert engine.next_deadline(T0) == T0 + 600, "the time limit; no node timeout"
    assert engine.tick(T0 + 599) == []
    assert engine.nodes["node1"].up
    assert engine.config.node_timeout_s == 30, "the configuration is the user's, unchanged"


def test_a_live_engine_keeps_the_start_delay_and_the_node_timeout() -> None:
    engine = one_node(EngineConfig(node_timeout_s=30, start_delay_s=0.3), LIVE)
    job = engine.submit(spec(), T0)
    assert engine.schedule(T0) == []
    assert engine.next_deadline(T0) == T0 + 0.3
    assert engine.schedule(T0 + 0.3) == [Launch(job.id, "node1")]
    assert engine.next_deadline(T0 + 0.3) == T0 + 30, "the node's timeout comes before the time limit"
    engine.tick(T0 + 31)
    assert not engine.nodes["node1"].up


def test_a_node_timeout_of_inf_in_the_config_file_means_never() -> None:
    engine = one_node(settings_from_dict({"node_timeout_s": float("inf")}), LIVE)
    assert engine.node_timeout_s is None
    assert engine.next_deadline(T0) is None
    assert engine.tick(T0 + 1e12) == []
    assert engine.nodes["node1"].up
