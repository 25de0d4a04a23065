"""Interactive work is never requeued: an allocation (salloc, or srun outside a job) lives for its holder,
a notebook session for its kernels. Slurm likewise: job_requeue refuses a job that is not batch
(ESLURM_BATCH_ONLY, "Only batch jobs are accepted or processed"), and a preemption under PreemptMode=REQUEUE
that cannot requeue kills the job instead (slurmctld's preempt.c). Before, a preempted salloc under a
requeue-mode QOS waited PENDING for a holder that had gone, and `scontrol requeue` of one did the same."""
from __future__ import annotations

import dataclasses

import pytest

from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu
from corral.engine.build import build_engine
from corral.engine.commands import Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.lifecycle import WrongState
from corral.engine.membership import Inventory
from corral.engine.records import JobState
from tests.engine.builders import T0, engine_with_nodes, spec
from tests.engine.harness import Harness
from tests.engine.test_services import run
from tests.engine.test_sessions import started

REQUEUE_QOS = TenancySpec(qos=[{"name": "scavenger", "preempt_mode": "requeue"}, {"name": "normal"},
                               {"name": "train", "priority": 10, "preempts": ["scavenger"]}])


def one_gpu_engine() -> Harness:
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=REQUEUE_QOS))
    engine.register_node("n1", Inventory((Gpu(0),), 64, 512_000, "x"), set(), set(), T0)
    return engine


def allocation(**more):
    return dataclasses.replace(spec(gpus=1), argv=None, allocation=True, **more)


def test_a_preempted_allocation_under_a_requeue_qos_ends_preempted_and_frees_its_gpu() -> None:
    engine = one_gpu_engine()
    held = engine.submit(allocation(qos="scavenger"), T0)
    engine.schedule(T0)
    assert held.state is JobState.RUNNING
    urgent = engine.submit(dataclasses.replace(spec(gpus=1), qos="train"), T0 + 1)
    engine.schedule(T0 + 1)
    # Nothing of an allocation's own runs on the node: the preemption ends it at once.
    assert held.state is JobState.PREEMPTED, "requeued, it would wait for a holder that is gone"
    assert held.restart_count == 0
    assert engine.schedule(T0 + 2) == [Launch(urgent.id, "n1")]
    assert engine.schedule(T0 + 3) == [], "nothing of the allocation comes back"


def test_a_preempted_batch_job_under_the_same_qos_is_still_requeued() -> None:
    engine = one_gpu_engine()
    batch = engine.submit(dataclasses.replace(spec(gpus=1), qos="scavenger", batch=True), T0)
    engine.schedule(T0)
    run(engine, batch, T0)
    engine.submit(dataclasses.replace(spec(gpus=1), qos="train"), T0 + 1)
    engine.schedule(T0 + 1)
    assert batch.final_state is JobState.PENDING


@pytest.mark.parametrize("who", ["allocation", "session"])
def test_requeueing_interactive_work_is_refused_and_changes_nothing(who: str) -> None:
    engine = engine_with_nodes(count=1)
    if who == "allocation":
        job = engine.submit(allocation(), T0)
        engine.schedule(T0)
    else:
        job = started(engine)
    with pytest.raises(WrongState, match=f"job {job.id} is an? .*: only batch jobs can be requeued"):
        engine.requeue(job.id, T0 + 5)
    assert (job.state, job.final_state, job.stop_cause) == (JobState.RUNNING, None, "")
