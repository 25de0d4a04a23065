"""Submissions in Slurm's terms become normalized requests, or are refused with a specific message."""
from __future__ import annotations

import pytest

from corral.api.schemas import JobSubmit
from corral.core.model import Gpu
from corral.engine.admission import AdmissionError, admit
from corral.engine.config import EngineConfig, PartitionConfig
from corral.engine.records import Node

CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True, max_time_s=7200),
                                  PartitionConfig("cpu", nodes="cpu[1-2]")))
NODES = [Node(f"node{i}", tuple(Gpu(g) for g in range(4)), 16, 64_000, partitions=frozenset({"gpu"}))
         for i in (1, 2)] + [Node("cpu1", (), 8, 32_000, partitions=frozenset({"cpu"}))]


def submit(**fields) -> JobSubmit:
    return JobSubmit(**{"argv": ["true"], "workdir": "/tmp", "user": "alice", **fields})


@pytest.mark.parametrize("fields, want", [
    (dict(), (1, 1, 0, 3600)),
    (dict(nodes=2, ntasks_per_node=2, gpus_per_task=1), (2, 2, 2, 3600)),
    (dict(gpus=8), (2, 1, 4, 3600)),
    (dict(ntasks=4, ntasks_per_node=2, gpus_per_node=2), (2, 2, 2, 3600)),
    (dict(nodes=2, gpus=4, time_limit_s=60), (2, 1, 2, 60)),
    (dict(gpus_per_node=2, gpus=2), (1, 1, 2, 3600)),
])
def test_normalization(fields, want) -> None:
    req = admit(submit(**fields), CONFIG, NODES).request
    assert (req.num_nodes, req.tasks_per_node, req.gpus_per_node, req.time_limit_s) == want


@pytest.mark.parametrize("fields, message", [
    (dict(partition="nope"), "invalid partition name specified: 'nope'"),
    (dict(gpus_per_node=5), "requested node configuration is not available"),
    (dict(nodes=3, gpus_per_node=1), "partition 'gpu' has 2 such node(s)"),
    (dict(time_limit_s=7201), "exceeds the maximum 7200s of partition 'gpu'"),
    (dict(ntasks=3, nodes=2), "does not split evenly over 2 nodes"),
    (dict(gpus_per_node=2, gpus=2, nodes=2), "conflicting GPU requests"),
    (dict(mem_mib=10, mem_per_cpu_mib=10), "mutually exclusive"),
    (dict(partition="cpu", gpus=1), "requested node configuration is not available"),
    (dict(expedited_requeue=True, requeue=False), "expedited requeue (--requeue=expedite) is for jobs that may be"),
    (dict(expedited_requeue=True, argv=None, allocation=True), "nor for an allocation (salloc)"),
])
def test_refusals(fields, message) -> None:
    with pytest.raises(AdmissionError) as err:
        admit(submit(**fields), CONFIG, NODES)
    assert message in str(err.value)


def test_script_needs_interpreter_line() -> None:
    sub = JobSubmit(script="echo hi\n", workdir="/tmp", user="alice")
    with pytest.raises(AdmissionError, match="#!"):
        admit(sub, CONFIG, NODES)


def test_partition_without_nodes_is_refused() -> None:
    config = EngineConfig(partitions=(PartitionConfig("gpu", default=True), PartitionConfig("empty", nodes="x1")))
    with pytest.raises(AdmissionError, match="has no nodes"):
        admit(submit(partition="empty"), config, NODES)
