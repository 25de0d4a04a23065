"""Services through the engine: replicas are jobs, submitted, restarted with CrashLoopBackOff, rescheduled,
preempted and brought back, scaled, updated and deleted by the reconciler."""
from __future__ import annotations

import dataclasses
import signal

import pytest

from corral.api.services import ServiceSpec
from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu
from corral.engine import events as ev
from corral.engine.admission import AdmissionError
from corral.engine.build import build_engine
from corral.engine.commands import Kill, Launch
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.events import ProbeResult
from corral.engine.membership import Inventory
from corral.engine.records import JobState
from corral.engine.service_events import DRAIN_S
from tests.engine.builders import T0, engine_with_nodes, spec
from tests.engine.harness import Harness


def web(**more) -> ServiceSpec:
    return ServiceSpec(**{"name": "web", "command": ["serve"], "replicas": 2, "gpus_per_node": 1,
                          "workdir": "/srv", **more})


def replicas(engine, name: str = "web") -> list:
    return sorted((j for j in engine.jobs.values() if j.spec.service == name), key=lambda j: (j.spec.replica, j.id))


def run(engine, job, now: float) -> None:
    for node in job.runs:
        engine.node_started(node, job.id, now)


def exit_(engine, job, code: int, now: float) -> list:
    return [c for node in list(job.runs) for c in engine.node_finished(node, job.id, [(0, code, 0)], None, now)]


def test_applying_a_service_submits_its_replicas_as_jobs_of_kind_service() -> None:
    engine = engine_with_nodes(count=2)
    service = engine.apply_service(web(), T0)
    assert (service.revision, service.desired_replicas, service.spec.user) == (1, 2, "alice")
    jobs = replicas(engine)
    assert [(j.spec.replica, j.spec.kind.name, j.spec.name, j.spec.service_revision) for j in jobs] == [
        (0, "service", "web", 1), (1, "service", "web", 1)]
    assert jobs[0].spec.env["CORRAL_SERVICE"] == "web" and jobs[1].spec.env["CORRAL_REPLICA"] == "1"
    assert jobs[0].spec.request.time_limit_s == 2**31 - 1, "no time limit of its own"
    assert engine.dirty_services == {"web": service}
    assert sorted(c.job_id for c in engine.schedule(T0 + 1)) == [j.id for j in jobs]


def test_a_replica_that_could_never_be_admitted_refuses_the_service_and_creates_nothing() -> None:
    engine = engine_with_nodes(count=2, gpus=4)
    with pytest.raises(AdmissionError, match=r"^gpus_per_node=9: no replica can ever fit: requested node "
                                             r"configuration is not available: .* GPU"):
        engine.apply_service(web(gpus_per_node=9), T0)
    assert engine.services == {} and engine.jobs == {}


def test_a_crashing_replica_backs_off_doubling_to_the_cap_and_resets_after_a_healthy_run() -> None:
    engine = engine_with_nodes(count=1)
    service = engine.apply_service(web(replicas=1, restart={"backoff_initial_s": 10, "backoff_max_s": 40,
                                                            "reset_after_s": 600}), T0)
    job = replicas(engine)[0]
    now, delays = T0, []
    for _ in range(5):
        engine.schedule(now)
        assert job.state is JobState.RUNNING
        run(engine, job, now)
        exit_(engine, job, 1, now + 1)
        assert job.state is JobState.PENDING, "the same job comes back"
        delays.append(job.eligible_at - (now + 1))
        assert engine.schedule(job.eligible_at - 0.5) == [], "not before its backoff"
        now = job.eligible_at
    assert delays == [10, 20, 40, 40, 40]
    assert (job.restart_count, service.restarts[0].count, service.restarts[0].streak) == (5, 5, 5)
    assert service.history[-1]["detail"] == "replica 0 restarted: exited with 1 (in 40 s)"
    engine.schedule(now)
    run(engine, job, now)
    exit_(engine, job, 0, now + 600)  # ran healthy for reset_after_s: the row starts again
    assert job.eligible_at - (now + 600) == 10 and service.restarts[0].streak == 1


def test_a_crash_looping_replica_waits_off_its_gpus_so_batch_work_runs() -> None:
    engine = engine_with_nodes(count=1, gpus=4)
    engine.apply_service(web(replicas=1, gpus_per_node=4), T0)
    replica = replicas(engine)[0]
    engine.schedule(T0)
    exit_(engine, replica, 1, T0 + 1)
    batch = engine.submit(spec(gpus=4), T0 + 2)
    assert engine.schedule(T0 + 2) == [Launch(batch.id, "node1")], "the replica in backoff holds nothing"
    assert replica.state is JobState.PENDING


def test_a_replica_on_a_lost_node_is_rescheduled_at_once_elsewhere() -> None:
    engine = engine_with_nodes(count=2, gpus=1)
    service = engine.apply_service(web(replicas=1), T0)
    job = replicas(engine)[0]
    engine.schedule(T0)
    first = job.node_names[0]
    run(engine, job, T0 + 1)
    engine.node_lost(first, T0 + 5)
    assert (job.state, job.eligible_at, job.ready) == (JobState.PENDING, None, False)
    other = "node2" if first == "node1" else "node1"
    assert engine.schedule(T0 + 5) == [Launch(job.id, other)]
    assert service.restarts == {}, "a node failure is no crash: no backoff"


def test_a_preempted_replica_comes_back_when_capacity_returns_even_in_cancel_mode() -> None:
    tenancy = TenancySpec(qos=[{"name": "low", "preempt_mode": "cancel"}, {"name": "normal"},
                               {"name": "high", "priority": 10, "preempts": ["low"]}])
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=tenancy))
    engine.register_node("n1", Inventory(tuple(Gpu(i) for i in range(4)), 64, 512_000, "x"), set(), set(), T0)
    engine.apply_service(web(replicas=1, gpus_per_node=4, qos="low"), T0)
    replica = replicas(engine)[0]
    engine.schedule(T0)
    urgent = engine.submit(dataclasses.replace(spec(gpus=4), qos="high"), T0 + 1)
    assert [(c.job_id, c.reason) for c in engine.schedule(T0 + 1) if isinstance(c, Kill)] == [
        (replica.id, "preemption")]
    exit_(engine, replica, 0, T0 + 2)
    assert replica.state is JobState.PENDING
    assert engine.schedule(T0 + 2) == [Launch(urgent.id, "n1")]
    exit_(engine, urgent, 0, T0 + 3)
    assert engine.schedule(T0 + 3) == [Launch(replica.id, "n1")]


def test_a_failing_liveness_probe_restarts_the_replica_and_says_why() -> None:
    engine = engine_with_nodes(count=1)
    service = engine.apply_service(web(replicas=1, ports=[{"name": "http"}],
                                       probes={"liveness": {"http": {"port": "http"}}}), T0)
    job = replicas(engine)[0]
    engine.schedule(T0)
    run(engine, job, T0 + 1)
    kills = engine.report_probes(job.id, "node1", T0 + 30, liveness=ProbeResult(False, 3, "HTTP 500"))
    assert [(k.signal, k.reason) for k in kills] == [(signal.SIGTERM, "failure")]
    exit_(engine, job, 0, T0 + 31)
    assert job.state is JobState.PENDING and job.eligible_at == T0 + 41
    assert service.history[-1]["detail"] == (
        "replica 0 restarted: liveness probe failed 3 times: HTTP 500 (in 10 s)")


def test_readiness_comes_from_the_probe_and_without_one_from_the_start() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(replicas=1, ports=[{"name": "http"}], probes={"readiness": {"tcp": {"port": "http"}}}),
                         T0)
    engine.apply_service(web(name="plain", replicas=1), T0)
    probed, plain = replicas(engine)[0], replicas(engine, "plain")[0]
    engine.schedule(T0)
    engine.handle(*[ev.TasksStarted(
        j.node_names[0], j.id, ports={"http": 41000 + j.id}) for j in (probed, plain)], now=T0 + 1)
    assert (probed.ready, plain.ready) == (False, True)
    assert probed.endpoints == {probed.node_names[0]: {"http": 41000 + probed.id}}
    engine.report_probes(probed.id, probed.node_names[0], T0 + 2, readiness=ProbeResult(True))
    assert probed.ready
    engine.report_probes(probed.id, probed.node_names[0], T0 + 3, readiness=ProbeResult(False, 3, "refused"))
    assert not probed.ready and probed.state is JobState.RUNNING, "not ready is no restart"


def test_scaling_down_stops_the_highest_indexes_and_up_submits_new_ones() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(replicas=3), T0)
    engine.schedule(T0)
    third = replicas(engine)[2]
    kills = engine.handle(ev.ServiceScaled("web", 2),
                          now=T0 + 1).commands
    assert [k.job_id for k in kills] == [third.id] and third.final_state is JobState.CANCELLED
    assert third.history[-1].reason == "scaled down to 2"
    engine.scale_service("web", 4, T0 + 2)
    assert sorted(j.spec.replica for j in replicas(engine) if j.state is JobState.PENDING) == [2, 3]


def test_deleting_a_service_stops_its_replicas_then_forgets_it() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(), T0)
    engine.schedule(T0)
    running = replicas(engine)
    assert sorted(k.job_id for k in engine.delete_service("web", T0 + 1)) == sorted(j.id for j in running)
    assert "web" in engine.services and not engine.forgotten_services
    for job in running:
        exit_(engine, job, 0, T0 + 2)
    assert [j.state for j in running] == [JobState.CANCELLED, JobState.CANCELLED]
    assert "web" not in engine.services and engine.forgotten_services == {"web"}


def test_a_rolling_update_surges_waits_for_ready_then_drains_the_old_replica() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(), T0)
    engine.schedule(T0)
    old = replicas(engine)
    for job in old:
        run(engine, job, T0 + 1)
    service = engine.apply_service(web(command=["serve", "--v2"]), T0 + 10)
    assert service.revision == 2
    new = [j for j in replicas(engine) if j.spec.service_revision == 2]
    assert [j.spec.replica for j in new] == [0], "max_surge 1: one new replica at a time"
    engine.schedule(T0 + 11)
    run(engine, new[0], T0 + 12)  # no readiness probe: ready once started; the old replica 0 is drained
    assert old[0].draining and old[0].state is JobState.RUNNING and old[0].final_state is None
    assert old[0].history[-1].reason == "replaced by revision 2"
    assert killed_by(engine.tick(T0 + 13)) == set() and old[0].final_state is None, "its SIGTERM waits"
    kills = killed_by(engine.tick(T0 + 12 + DRAIN_S))
    assert kills == {old[0].id} and old[0].final_state is JobState.CANCELLED
    exit_(engine, old[0], 0, T0 + 15)
    second = [j for j in replicas(engine) if j.spec.service_revision == 2 and j.spec.replica == 1]
    assert len(second) == 1
    engine.schedule(T0 + 16)
    run(engine, second[0], T0 + 17)
    engine.tick(T0 + 17 + DRAIN_S)
    exit_(engine, old[1], 0, T0 + 20)
    assert {j.spec.service_revision for j in replicas(engine)} == {2}
    assert service.update_started is None and service.history[-1]["event"] == "updated"


def test_a_draining_replica_is_listed_as_such_and_its_kill_is_the_next_deadline() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(), T0)
    engine.schedule(T0)
    for job in replicas(engine):
        run(engine, job, T0 + 1)
    engine.scale_service("web", 1, T0 + 5)
    leaving = [j for j in replicas(engine) if j.spec.replica == 1][0]
    assert leaving.draining and leaving.drain_until == T0 + 5 + DRAIN_S
    assert engine.next_deadline(T0 + 5) == T0 + 5 + DRAIN_S
    assert killed_by(engine.tick(T0 + 5 + DRAIN_S)) == {leaving.id}


def test_a_replica_that_is_not_ready_is_stopped_at_once() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(), T0)
    engine.schedule(T0)
    for job in replicas(engine):
        run(engine, job, T0 + 1)
    leaving = [j for j in replicas(engine) if j.spec.replica == 1][0]
    leaving.ready = False  # its readiness probe failed: the gateway sends it nothing already
    engine.scale_service("web", 1, T0 + 5)
    assert not leaving.draining and leaving.final_state is JobState.CANCELLED


def killed_by(commands) -> set[int]:
    return {c.job_id for c in commands or () if isinstance(c, Kill)}


def test_an_update_whose_replicas_never_get_ready_is_rolled_back() -> None:
    engine = Harness(build_engine(EngineConfig(), SIMULATED))  # no node timeouts: only the update's deadline
    for name in ("node1", "node2"):
        engine.register_node(name, Inventory(tuple(Gpu(i) for i in range(4)), 64, 512_000, "x"), set(), set(), T0)
    probes = {"readiness": {"tcp": {"port": "http"}}}
    engine.apply_service(web(replicas=1, ports=[{"name": "http"}], probes=probes), T0)
    engine.schedule(T0)
    old = replicas(engine)[0]
    run(engine, old, T0 + 1)
    engine.report_probes(old.id, old.node_names[0], T0 + 2, readiness=ProbeResult(True))
    service = engine.apply_service(web(replicas=1, ports=[{"name": "http"}], probes=probes, command=["broken"],
                                       update={"ready_timeout_s": 60}), T0 + 10)
    new = [j for j in replicas(engine) if j.spec.service_revision == 2][0]
    engine.schedule(T0 + 11)
    run(engine, new, T0 + 12)
    assert engine.next_deadline(T0 + 12) == T0 + 70
    assert engine.tick(T0 + 69) == [] and service.revision == 2
    kills = engine.tick(T0 + 70)
    assert [k.job_id for k in kills] == [new.id], "the new replica goes, the old one stays"
    assert (service.revision, service.spec.command, old.state) == (1, ["serve"], JobState.RUNNING)
    assert service.history[-1]["event"] == "rolled-back"


def test_the_autoscaler_follows_the_gateways_in_flight_requests() -> None:
    engine = engine_with_nodes(count=2)
    service = engine.apply_service(web(replicas=1, autoscale={"min_replicas": 1, "max_replicas": 3,
                                                              "target_inflight": 4, "scale_down_window_s": 0}), T0)
    engine.report_load("web", inflight=10, rps=50, now=T0 + 1)
    assert service.desired_replicas == 3 and len(replicas(engine)) == 3
    engine.report_load("web", inflight=100, rps=50, now=T0 + 2)
    assert service.desired_replicas == 3, "at most max_replicas"
    engine.report_load("web", inflight=0, rps=0, now=T0 + 3)
    assert service.desired_replicas == 1, "at least min_replicas"


# (seconds after the start, in-flight requests) reported, and the desired count after each; target 4 per
# replica, window 60 s.
@pytest.mark.parametrize(("reports", "want"), [
    ([(1, 12), (5, 0), (30, 12), (40, 0)], [3, 3, 3, 3]),  # a pause shorter than the window: no flapping
    ([(1, 12), (5, 0), (64, 0), (65, 0)], [3, 3, 3, 1]),  # lower for the whole window: down
    ([(1, 12), (5, 4), (30, 8), (65, 0)], [3, 3, 3, 2]),  # down to the most wanted in the window
    ([(1, 4), (5, 12), (6, 0), (7, 12)], [1, 3, 3, 3]),  # up at once, and a rise ends the window
])
def test_the_autoscaler_scales_down_only_after_a_whole_window(reports: list, want: list[int]) -> None:
    engine = engine_with_nodes(count=2)
    service = engine.apply_service(web(replicas=1, autoscale={"min_replicas": 1, "max_replicas": 3,
                                                              "target_inflight": 4}), T0)
    got = []
    for at, inflight in reports:
        engine.report_load("web", inflight=inflight, rps=0, now=T0 + at)
        got.append(service.desired_replicas)
    assert got == want


def _preempting_engine(overrides: bool) -> Harness:
    tenancy = TenancySpec(qos=[{"name": "low"}, {"name": "normal"},
                               {"name": "high", "priority": 10, "preempts": ["low"]},
                               {"name": "urgent", "priority": 20, "preempts": ["low"],
                                "overrides_min_ready": overrides}])
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=tenancy))
    engine.register_node("n1", Inventory(tuple(Gpu(i) for i in range(3)), 64, 512_000, "x"), set(), set(), T0)
    return engine


@pytest.mark.parametrize(("qos", "gpus", "min_ready", "want_victims"), [
    ("high", 1, 2, 1),  # 3 ready, min_ready 2: one may go
    ("high", 2, 2, 0),  # two would take it below min_ready: none is taken
    ("high", 2, 0, 2),  # no min_ready: no budget
    ("high", 1, 3, 0),  # at its min_ready
    ("urgent", 2, 3, 2),  # a QOS that overrides min_ready
])
def test_preemption_takes_replicas_only_above_min_ready(qos: str, gpus: int, min_ready: int,
                                                        want_victims: int) -> None:
    engine = _preempting_engine(overrides=True)
    engine.apply_service(web(replicas=3, qos="low", min_ready=min_ready), T0)
    engine.schedule(T0)
    for job in replicas(engine):
        run(engine, job, T0 + 1)
    engine.submit(dataclasses.replace(spec(gpus=gpus), qos=qos), T0 + 2)
    kills = [c for c in engine.schedule(T0 + 2) if isinstance(c, Kill)]
    assert len(kills) == want_victims


def test_applying_a_new_replica_count_scales_without_a_rolling_update() -> None:
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(), T0)
    engine.schedule(T0)
    service = engine.apply_service(web(replicas=3, min_ready=1), T0 + 1)
    assert (service.revision, service.desired_replicas, service.update_started) == (1, 3, None)
    assert sorted((j.spec.replica, j.spec.service_revision) for j in replicas(engine)) == [(0, 1), (1, 1), (2, 1)]
    assert engine.apply_service(web(replicas=3, min_ready=1, env={"V": "2"}), T0 + 2).revision == 2


def test_a_service_whose_replica_is_refused_later_waits_with_the_reason() -> None:
    tenancy = TenancySpec(accounts=[{"name": "a"}], users=[{"name": "alice", "accounts": ["a"]}],
                          limits=[{"user": "alice", "max_submit_jobs": 2}])
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=tenancy))
    engine.register_node("n1", Inventory(tuple(Gpu(i) for i in range(4)), 64, 512_000, "x"), set(), set(), T0)
    service = engine.apply_service(web(replicas=3, account="a"), T0)
    assert len(replicas(engine)) == 2
    assert service.reason.startswith("replica 2 not admitted: ") and "2" in service.reason, service.reason


@pytest.mark.parametrize(("placement", "nodes", "want_per_node"), [
    ({"max_per_node": 1}, 3, [1, 1, 1]),
    ({"spread": True}, 3, [1, 1, 1]),
    ({"max_per_node": 2}, 3, [2, 1]),  # best fit packs, up to the limit
    ({}, 3, [3]),
])
def test_placement_spreads_replicas_over_nodes(placement: dict, nodes: int, want_per_node: list[int]) -> None:
    engine = engine_with_nodes(count=nodes, gpus=4)
    engine.apply_service(web(replicas=3, placement=placement), T0)
    engine.schedule(T0)
    per_node: dict[str, int] = {}
    for job in replicas(engine):
        assert job.state is JobState.RUNNING
        per_node[job.node_names[0]] = per_node.get(job.node_names[0], 0) + 1
    assert sorted(per_node.values(), reverse=True) == want_per_node


@pytest.mark.parametrize(("placement", "want_states"), [
    ({"spread": True}, ["RUNNING", "RUNNING", "RUNNING"]),  # 3 over the 2 live nodes: 2 + 1
    ({"spread": True, "max_per_node": 1}, ["PENDING", "RUNNING", "RUNNING"]),  # max_per_node stays a hard cap
])
def test_spread_counts_only_nodes_that_can_take_work(placement: dict, want_states: list[str]) -> None:
    """A lost node's replica moves to a live node beside its siblings; a drained node is not counted either."""
    for lose in ("lost", "drained"):
        engine = engine_with_nodes(count=3, gpus=4)
        if lose == "drained":
            engine.set_drain("node3", True, "maintenance", T0)
        engine.apply_service(web(replicas=3, placement=placement), T0)
        engine.schedule(T0)
        if lose == "lost":
            for job in replicas(engine):
                run(engine, job, T0 + 1)
            engine.node_lost("node3", T0 + 5)
            engine.schedule(T0 + 5)
        jobs = replicas(engine)
        assert sorted(j.state.value for j in jobs) == want_states, lose
        assert all(j.node_names[0] != "node3" for j in jobs if j.state is JobState.RUNNING), lose


def test_a_replica_with_no_node_left_under_max_per_node_waits() -> None:
    engine = engine_with_nodes(count=2, gpus=4)
    engine.apply_service(web(replicas=3, placement={"max_per_node": 1}), T0)
    engine.schedule(T0)
    states = sorted(j.state.value for j in replicas(engine))
    assert states == ["PENDING", "RUNNING", "RUNNING"]
    assert sorted(j.node_names[0] for j in replicas(engine) if j.slices) == ["node1", "node2"]


def test_a_ready_replica_being_stopped_is_drained_before_its_sigterm_and_others_are_not() -> None:
    """The gateway must stop routing to a replica before it gets SIGTERM. One the reconciler stops is drained
    by the engine (listed as draining for DRAIN_S, then signalled with no second drain); one stopped another
    way (a cancel, a preemption) gets a Kill that its agent holds for service_drain_s (its kill deadline moves
    as far); a replica never ready, and batch work, are signalled at once."""
    engine = engine_with_nodes(count=2)
    engine.apply_service(web(replicas=3), T0)
    batch = engine.submit(spec(name="batch"), T0)
    engine.schedule(T0)
    ready_one, ready_two, never_ready = replicas(engine)
    run(engine, ready_one, T0 + 1)
    run(engine, ready_two, T0 + 1)
    assert ready_one.ready and ready_two.ready and not never_ready.ready
    drain = engine.config.service_drain_s
    assert drain == 2.0
    kills = engine.handle(ev.ServiceScaled("web", 1), now=T0 + 5).commands
    by_job = {k.job_id: k for k in kills}
    assert ready_two.id not in by_job and ready_two.drain_until == T0 + 5 + DRAIN_S
    assert by_job[never_ready.id].drain_s == 0.0, "never routed to: nothing to drain"
    [after_drain] = [k for k in engine.tick(T0 + 5 + DRAIN_S) or () if isinstance(k, Kill)]
    assert (after_drain.job_id, after_drain.drain_s, after_drain.signal) == (ready_two.id, 0.0, signal.SIGTERM)
    [cancelled] = engine.cancel(ready_one.id, T0 + 8)
    assert cancelled.drain_s == drain and cancelled.signal == signal.SIGTERM
    assert ready_one.kill_deadline == T0 + 8 + drain + engine.config.kill_grace_s + engine.config.kill_report_timeout_s
    assert batch.state is JobState.RUNNING
    [batch_kill] = engine.cancel(batch.id, T0 + 9)
    assert batch_kill.drain_s == 0.0


def test_a_preempting_gang_keeps_what_its_first_stopped_victim_freed_until_the_second_has_stopped() -> None:
    """The gang-against-replicas loop (tests/e2e/test_services.py's gang test, 1 run in 3 under load): two
    replicas of 2 GPUs, one per 2-GPU node, preempted by a 2-node gang; the first replica stops (requeued,
    eligible at once) a cycle before the second. It must not start again on the node it freed, where it would
    be preempted again next cycle, and so on (core/preemption.py: hold_for_stopping)."""
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=TenancySpec(qos=[
        {"name": "low"}, {"name": "normal"}, {"name": "high", "priority": 10, "preempts": ["low"]}])))
    for name in ("n1", "n2"):
        engine.register_node(name, Inventory(tuple(Gpu(i) for i in range(2)), 64, 512_000, "x"), set(), set(), T0)
    engine.apply_service(web(replicas=2, gpus_per_node=2, qos="low"), T0)
    engine.schedule(T0)
    first, second = replicas(engine)
    for job in (first, second):
        run(engine, job, T0 + 1)
    gang = engine.submit(dataclasses.replace(spec(nodes=2, gpus=2), qos="high"), T0 + 2)
    assert sorted(c.job_id for c in engine.schedule(T0 + 2) if isinstance(c, Kill)) == [first.id, second.id]
    exit_(engine, first, 0, T0 + 3)
    assert first.state is JobState.PENDING
    assert engine.schedule(T0 + 3) == [], "the first replica started again on the node it freed"
    exit_(engine, second, 0, T0 + 4)
    assert {c.job_id for c in engine.schedule(T0 + 4) if isinstance(c, Launch)} == {gang.id}
    assert gang.state is JobState.RUNNING and sorted(gang.node_names) == ["n1", "n2"]
    assert (first.state, second.state) == (JobState.PENDING, JobState.PENDING)
