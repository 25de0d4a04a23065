"""SLURM_GPUS_PER_NODE: Slurm sets it in a job's environment when --gpus-per-node was requested, and only
then (slurm-compat.md section 4), from admission (which options the user gave) to the task's variables."""
from __future__ import annotations

import pytest

from corral.agent.environment import task_environment
from corral.api.schemas import JobSubmit
from corral.core.model import Gpu
from corral.engine.admission import admit
from corral.engine.config import EngineConfig, PartitionConfig
from corral.engine.records import Node
from corral.protocol import TaskLaunch

CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True),))
NODES = [Node(f"node{i}", tuple(Gpu(g) for g in range(4)), 16, 64_000, partitions=frozenset({"gpu"}))
         for i in (1, 2)]


def explicit_of(**fields) -> list[str]:
    sub = JobSubmit(**{"argv": ["true"], "workdir": "/tmp", "user": "alice", **fields})
    return [k for k in admit(sub, CONFIG, NODES).explicit.split(",") if k]


def test_admission_records_that_gpus_per_node_was_given() -> None:
    assert "gpus_per_node" in explicit_of(nodes=2, gpus_per_node=3)
    assert "gpus_per_node" not in explicit_of(gpus=2)  # a job total is not a per-node request
    assert "gpus_per_node" not in explicit_of(nodes=2, ntasks_per_node=2, gpus_per_task=1)


@pytest.mark.parametrize("batch", [False, True])
def test_the_variable_is_set_exactly_when_gpus_per_node_was_requested(make_launch, batch) -> None:
    def env_of(explicit: list[str]) -> dict[str, str]:
        launch = make_launch(nodes=["gpu01", "gpu02"], node_index=1, node_gpus=[1, 3], explicit=explicit,
                             batch=batch, tasks=[TaskLaunch(rank=1, local_rank=0, gpus=[1, 3])])
        return task_environment(launch, launch.tasks[0], "gpu02", {"PATH": "/usr/bin"})

    assert env_of(["gpus_per_node"])["SLURM_GPUS_PER_NODE"] == "2"
    assert "SLURM_GPUS_PER_NODE" not in env_of([])
    assert "SLURM_GPUS_PER_NODE" not in env_of(["ntasks"])


def test_srun_outside_a_job_sets_it_for_its_steps_when_given() -> None:
    """`corral run --gpus-per-node=N` (srun making its own allocation): srun exports what it was given."""
    from corral.slurm.srun.opts import parse_srun
    from corral.slurm.srun.step_client import requested_variables

    def variable(*argv: str) -> str | None:
        return requested_variables(parse_srun([*argv, "hostname"], {})).get("SLURM_GPUS_PER_NODE")

    assert variable("-N2", "--gpus-per-node=2") == "2"
    assert variable("--gpus-per-node=a100:2") == "a100:2"
    assert variable("--gpus=2") is None and variable("-n2") is None
