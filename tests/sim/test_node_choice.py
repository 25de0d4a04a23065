"""The simulator places jobs with -w, -x, --constraint and --exclusive as the live controller does (the same
engine decides): each job lands where it asked, an exclusive job alone on its node, and a refused choice is
refused with the live controller's text."""
from __future__ import annotations

from corral.api.schemas import JobSubmit
from corral.engine.config import EngineConfig, PartitionConfig
from corral.sim.driver import SimNode, SimSubmission, Simulation

CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True),))


def sub(at_s: float, duration_s: float, **fields) -> SimSubmission:
    request = JobSubmit(**{"argv": ["true"], "workdir": "/tmp", "user": "alice", "time_limit_s": 3600, **fields})
    return SimSubmission(at_s, request, duration_s)


def test_the_simulator_places_as_chosen():
    nodes = [SimNode("n1", 4, 16, 64_000, gpu_model="NVIDIA A100-SXM4-80GB", features=frozenset({"ib"})),
             SimNode("n2", 4, 16, 64_000, gpu_model="NVIDIA H100 80GB HBM3", features=frozenset({"ib"})),
             SimNode("n3", 4, 16, 64_000, gpu_model="NVIDIA H100 80GB HBM3")]
    sim = Simulation(CONFIG, nodes)
    subs = [
        sub(0, 100, constraint="h100&ib", gpus=1),  # 0: n2
        sub(0, 100, nodelist="n3", gpus=1),  # 1: n3
        sub(0, 100, exclude="n[2-3]", gpus=1),  # 2: n1
        sub(1, 50, exclusive=True, gpus=1),  # 3: no idle node until t=100, then a whole one
        sub(1, 10, gpus=1, nodelist="n1"),  # 4: beside job 2 on n1, at once
        sub(2, 10, constraint="v100"),  # refused
        sub(2, 10, nodelist="n[1-2]", nodes=1),  # refused
    ]
    sim.submit(subs)
    result = sim.run()
    jobs = {job.id: job for job in result.finished}
    placed = {i: tuple(sorted(jobs[result.ids[i]].runs)) for i in range(5)}
    assert placed == {0: ("n2",), 1: ("n3",), 2: ("n1",), 3: placed[3], 4: ("n1",)}
    exclusive = jobs[result.ids[3]]
    assert result.first_starts[exclusive.id] >= 100, "it waited for a whole idle node"
    (piece,) = exclusive.slices
    assert (len(piece.gpus), piece.cpus, piece.mem_mib) == (4, 16, 64_000)
    start, end = result.first_starts[exclusive.id], result.first_starts[exclusive.id] + 50
    for job in jobs.values():
        if job is not exclusive and job.id in result.first_starts and piece.node in job.runs:
            began = result.first_starts[job.id]
            assert not start <= began < end, f"job {job.id} started beside the exclusive job"
    assert "Invalid feature specification" in result.refused[5]
    assert "Required nodelist includes more nodes than permitted by max-node count (2 > 1)" in result.refused[6]
