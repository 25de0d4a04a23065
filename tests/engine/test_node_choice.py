"""Choosing nodes: sbatch -w/--nodelist, -x/--exclude, --constraint (declared and discovered node features)
and --exclusive, from the submission through admission to where the engine's cycle places the job."""
from __future__ import annotations

import pytest

from corral.api.schemas import JobSubmit
from corral.api.services import ServiceSpec
from corral.core.model import Gpu
from corral.engine import events as ev
from corral.engine.admission import AdmissionError, admit
from corral.engine.build import build_engine
from corral.engine.config import LIVE, EngineConfig, PartitionConfig
from corral.engine.membership import Inventory
from corral.engine.node_choice import NodeChoiceError, parse_constraint
from corral.engine.records import JobState, Node
from tests.engine.harness import Harness

T0 = 1_000.0
CONFIG = EngineConfig(partitions=(PartitionConfig("gpu", default=True), PartitionConfig("cpu", nodes="cpu1")))
NODES = [Node("n1", tuple(Gpu(g, "NVIDIA A100-SXM4-80GB") for g in range(4)), 16, 64_000,
              partitions=frozenset({"gpu"}), features=frozenset({"ib", "a100"})),
         Node("n2", tuple(Gpu(g, "NVIDIA H100 80GB HBM3") for g in range(4)), 16, 64_000,
              partitions=frozenset({"gpu"}), features=frozenset({"ib", "h100", "nvme"})),
         Node("n3", tuple(Gpu(g, "NVIDIA H100 80GB HBM3") for g in range(4)), 16, 64_000,
              partitions=frozenset({"gpu"}), features=frozenset({"h100"})),
         Node("cpu1", (), 8, 32_000, partitions=frozenset({"cpu"}))]


def submit(**fields) -> JobSubmit:
    return JobSubmit(**{"argv": ["true"], "workdir": "/tmp", "user": "alice", **fields})


@pytest.mark.parametrize("fields, message", [
    (dict(nodelist="n9"), "Invalid node name specified: n9"),
    (dict(exclude="n[1,9]"), "Invalid node name specified: n9"),
    (dict(nodelist="n[1-3]", nodes=2),
     "Required nodelist includes more nodes than permitted by max-node count (3 > 2)"),
    (dict(nodelist="n1", nodes=2), "corral places a job with --nodelist on exactly the listed nodes"),
    (dict(nodelist="n1", partition="cpu"),
     "Requested node configuration is not available: n1 not in the job's partition"),
    (dict(nodelist="n1", exclude="n1"), "n1 both in --nodelist and --exclude"),
    (dict(constraint="infiniband"), "Invalid feature specification: no node of the partition has infiniband"),
    (dict(constraint="ib&v100"), "Invalid feature specification: no node of the partition has v100"),
    (dict(constraint="[ib|nvme]"), "matching OR ([a|b]) is not supported by corral"),
    (dict(constraint="ib&h100|nvme"), "not both in one constraint"),
    (dict(constraint="ib*2"), "feature counts"),
    (dict(constraint="ib&&h100"), "Invalid feature specification"),
    (dict(constraint="nvme", nodes=2), "1 node(s) of the partition meet the job's --nodelist, --exclude and "
                                       "--constraint, it needs 2"),
    (dict(exclude="n[1-3],cpu1"), "0 node(s) of the partition meet"),
    (dict(nodelist="n1", gpus_per_node=8), "requested node configuration is not available"),
])
def test_refusals(fields, message) -> None:
    with pytest.raises(AdmissionError) as err:
        admit(submit(**fields), CONFIG, NODES)
    assert message in str(err.value)


def test_nodelist_sets_the_node_count_and_the_spec_keeps_the_choice() -> None:
    spec = admit(submit(nodelist="n[1-2]", constraint="ib", exclusive=True), CONFIG, NODES)
    assert spec.request.num_nodes == 2
    assert (spec.nodelist, spec.constraint, spec.exclusive) == ("n[1-2]", "ib", True)


def test_constraint_forms() -> None:
    assert parse_constraint("ib&h100").met_by(frozenset({"ib", "h100", "x"}))
    assert not parse_constraint("ib&h100").met_by(frozenset({"ib"}))
    assert parse_constraint("a100|h100").met_by(frozenset({"h100"}))
    assert not parse_constraint("a100|v100").met_by(frozenset({"h100"}))
    with pytest.raises(NodeChoiceError):
        parse_constraint("(a|b)&c")


def live_engine() -> Harness:
    engine = Harness(build_engine(EngineConfig(start_delay_s=0.0), LIVE))
    for name, model, features in (("node1", "NVIDIA A100-SXM4-80GB", {"ib"}),
                                  ("node2", "NVIDIA H100 80GB HBM3", {"ib"}),
                                  ("node3", "NVIDIA H100 80GB HBM3", set())):
        inventory = Inventory(tuple(Gpu(i, model) for i in range(4)), 16, 64_000, "127.0.0.1",
                              features=frozenset(features))
        engine.register_node(name, inventory, set(), set(), T0)
    return engine


def placed(engine: Harness, **fields) -> tuple[str, ...]:
    job_id, _ = engine.handle(ev.SubmissionRequested(submit(**fields)), now=T0).reply
    engine.schedule(T0 + 1)
    job = engine.jobs[job_id]
    return tuple(sorted(job.runs)) if job.state is JobState.RUNNING else ()


def test_the_engine_places_as_chosen_with_discovered_and_declared_features() -> None:
    engine = live_engine()
    assert engine.nodes["node2"].features == frozenset({"ib", "h100"})  # declared ib, discovered h100
    assert placed(engine, constraint="h100&ib") == ("node2",)
    assert placed(engine, nodelist="node3") == ("node3",)
    assert placed(engine, exclude="node[2-3]", gpus_per_node=3) == ("node1",)
    # node1 holds 3 GPUs, node2 and node3 one each: the exclusive job has no idle node left, and waits.
    assert placed(engine, exclusive=True) == ()


def test_an_exclusive_job_holds_its_node_whole() -> None:
    engine = live_engine()
    assert placed(engine, exclusive=True, nodelist="node1") == ("node1",)
    # Everything of node1 is the exclusive job's: a 1-GPU job on node1 waits.
    assert placed(engine, nodelist="node1") == ()
    job = next(j for j in engine.jobs.values() if j.spec.exclusive)
    (piece,) = job.slices
    assert (len(piece.gpus), piece.cpus, piece.mem_mib) == (4, 16, 64_000)


def service(**placement) -> ServiceSpec:
    return ServiceSpec(name="web", command=["serve"], replicas=2, gpus_per_node=1, workdir="/srv",
                       placement=placement)


def test_service_replicas_keep_to_the_placement_s_constraint_and_exclude() -> None:
    engine = live_engine()
    engine.apply_service(service(constraint="ib", exclude="node1"), T0)
    engine.schedule(T0 + 1)
    replicas = [j for j in engine.jobs.values() if j.spec.service == "web"]
    assert len(replicas) == 2 and all(j.state is JobState.RUNNING for j in replicas)
    assert {name for j in replicas for name in j.runs} == {"node2"}


def test_a_service_whose_placement_no_node_meets_is_refused_when_applied() -> None:
    engine = live_engine()
    with pytest.raises(AdmissionError, match="Invalid feature specification"):
        engine.apply_service(service(constraint="v100"), T0)
    assert not engine.jobs


def test_a_waiting_job_sees_a_node_that_joins_with_its_feature() -> None:
    engine = live_engine()
    assert placed(engine, nodelist="node1", gpus_per_node=4) == ("node1",)  # the ib nodes, node1 and node2, full
    assert placed(engine, nodelist="node2", gpus_per_node=4) == ("node2",)
    assert placed(engine, constraint="ib", gpus_per_node=4) == ()  # waits: node1 and node2 are full
    waiting = next(j for j in engine.jobs.values() if j.spec.constraint == "ib")
    inventory = Inventory(tuple(Gpu(i, "NVIDIA H100 80GB HBM3") for i in range(4)), 16, 64_000, "127.0.0.1",
                          features=frozenset({"ib"}))
    engine.register_node("node4", inventory, set(), set(), T0 + 2)
    engine.schedule(T0 + 3)
    assert (waiting.state, tuple(waiting.runs)) == (JobState.RUNNING, ("node4",))
