"""Properties of services under random stimuli (hypothesis): replicas never exceed what the spec allows
(the wanted count plus the update's surge, at most one current replica per index), no GPU is held twice, and a
crash-looping service in its own queue never holds more than its quota, so batch work in another queue runs."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.api.services import ServiceSpec
from corral.api.tenancy import TenancySpec
from corral.core.model import Gpu, Request
from corral.engine.build import build_engine
from corral.engine.config import SIMULATED, EngineConfig
from corral.engine.events import ProbeResult
from corral.engine.membership import Inventory
from corral.engine.records import JobSpec, JobState
from corral.engine.service_events import DRAIN_S
from corral.engine.services import present
from tests.engine.harness import Harness

T0 = 1000.0
QUOTA_GPUS = 4
TENANCY = TenancySpec(
    accounts=[{"name": "svc"}, {"name": "batch"}],
    users=[{"name": "alice", "accounts": ["svc"]}, {"name": "bob", "accounts": ["batch"]}],
    queues=[{"name": "qs", "accounts": ["svc"], "nominal": {"gpu": QUOTA_GPUS}},
            {"name": "qb", "accounts": ["batch"], "nominal": {"gpu": 8 - QUOTA_GPUS}}],
)

OPS = st.lists(st.one_of(
    st.tuples(st.just("schedule")),
    st.tuples(st.just("crash"), st.integers(0, 7)),
    st.tuples(st.just("ready"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("liveness"), st.integers(0, 7)),
    st.tuples(st.just("scale"), st.integers(0, 6)),
    st.tuples(st.just("update"),),
    st.tuples(st.just("batch"), st.integers(1, 4)),
    st.tuples(st.just("finish_batch"), st.integers(0, 7)),
    st.tuples(st.just("wait"), st.sampled_from([1.0, 10.0, 100.0, 700.0])),
), max_size=40)


def make_engine() -> Harness:
    engine = Harness(build_engine(EngineConfig(), SIMULATED, tenancy=TENANCY))
    for name in ("n1", "n2"):
        engine.register_node(name, Inventory(tuple(Gpu(i) for i in range(4)), 64, 512_000, "x"), set(), set(), T0)
    return engine


def web(revision_tag: int = 0, **more) -> ServiceSpec:
    probes = {"readiness": {"tcp": {"port": "http"}}}
    return ServiceSpec(name="web", command=["serve", str(revision_tag)], replicas=3,
                       workdir="/srv", gpus_per_node=1, account="svc",
                       queue="qs", ports=[{"name": "http"}], probes=probes, **more)


def check(engine: Harness) -> None:
    service = engine.services["web"]
    # A replica being drained (listed as draining, its SIGTERM DRAIN_S away) is leaving: not counted.
    replicas = [j for j in engine.jobs.values() if j.spec.service == "web" and present(j) and not j.draining]
    assert len(replicas) <= service.desired_replicas + service.spec.update.max_surge
    current = [j.spec.replica for j in replicas if j.spec.service_revision == service.revision]
    assert len(current) == len(set(current)), "one current replica per index"
    held: dict[tuple[str, int], int] = {}
    for job in engine.jobs.values():
        if job.state in (JobState.RUNNING, JobState.COMPLETING):
            for piece in job.slices:
                for gpu in piece.gpus:
                    assert (piece.node, gpu) not in held, f"GPU {piece.node}:{gpu} held twice"
                    held[piece.node, gpu] = job.id
    service_gpus = sum(j.gpu_count for j in engine.jobs.values()
                       if j.spec.service and j.state in (JobState.RUNNING, JobState.COMPLETING))
    assert service_gpus <= QUOTA_GPUS, "the service holds no more than its queue's quota"


def batch_spec(gpus: int) -> JobSpec:
    req = Request(num_nodes=1, gpus_per_node=gpus, time_limit_s=3600, partition="gpu")
    return JobSpec(name="b", user="bob", request=req, argv=("true",), account="batch", queue="qb")


class World:
    """The engine and what the random stimuli do to it; each op is a method named as the op."""

    def __init__(self) -> None:
        self.engine = make_engine()
        self.now = T0
        self.updates = 0
        self.engine.apply_service(web(), self.now)

    def running_replicas(self) -> list:
        return sorted((j for j in self.engine.jobs.values() if j.spec.service == "web"
                       and j.state is JobState.RUNNING), key=lambda j: j.id)

    def schedule(self) -> None:
        self.engine.schedule(self.now)
        for job in list(self.engine.jobs.values()):
            if job.state is JobState.RUNNING:
                for node, run in list(job.runs.items()):
                    if not run.started:
                        self.engine.node_started(node, job.id, self.now)

    def crash(self, pick: int) -> None:
        running = self.running_replicas()
        if running:
            self.end(running[pick % len(running)], 1)

    def ready(self, pick: int, ok: bool) -> None:
        running = self.running_replicas()
        if running:
            job = running[pick % len(running)]
            self.engine.report_probes(job.id, next(iter(job.runs)), self.now, readiness=ProbeResult(ok))

    def liveness(self, pick: int) -> None:
        running = self.running_replicas()
        if running:
            job = running[pick % len(running)]
            self.engine.report_probes(job.id, next(iter(job.runs)), self.now,
                                      liveness=ProbeResult(False, 3, "HTTP 500"))

    def scale(self, replicas: int) -> None:
        self.engine.scale_service("web", replicas, self.now)

    def update(self) -> None:
        self.updates += 1
        self.engine.apply_service(web(self.updates), self.now)

    def batch(self, gpus: int) -> None:
        self.engine.submit(batch_spec(gpus), self.now)

    def finish_batch(self, pick: int) -> None:
        done = [j for j in self.engine.jobs.values() if not j.spec.service and j.state is JobState.RUNNING]
        if done:
            self.end(done[pick % len(done)], 0)

    def wait(self, seconds: float) -> None:
        self.now += seconds
        self.engine.tick(self.now)

    def end(self, job, code: int) -> None:
        for node in list(job.runs):
            self.engine.node_finished(node, job.id, [(0, code, 0)], None, self.now)

    def reap(self) -> None:
        """Stopped jobs' processes go at once (an agent reporting its kills)."""
        for job in [j for j in self.engine.jobs.values() if j.state is JobState.COMPLETING]:
            for node, run in list(job.runs.items()):
                if not run.finished:
                    self.engine.node_finished(node, job.id, [(0, 0, 15)], None, self.now)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_services_stay_within_spec_and_quota(ops: list[tuple]) -> None:
    world = World()
    for name, *args in ops:
        world.now += 1.0
        getattr(world, name)(*args)
        world.reap()
        check(world.engine)
    # Batch work in the other queue is never starved by the service: what fits its quota starts, once the
    # replicas being drained (they hold their GPUs for DRAIN_S) are gone.
    world.wait(DRAIN_S + 1.0)
    world.reap()
    world.now += 1.0
    world.schedule()
    engine = world.engine
    batch_running = sum(j.gpu_count for j in engine.jobs.values() if not j.spec.service and j.state is JobState.RUNNING)
    free = {name: 4 for name in ("n1", "n2")}  # what no job holds: a pending job may wait for a node with room
    for job in engine.jobs.values():
        if job.state in (JobState.RUNNING, JobState.COMPLETING):
            for piece in job.slices:
                free[piece.node] -= len(piece.gpus)
    for job in engine.jobs.values():
        if not job.spec.service and job.state is JobState.PENDING:
            wanted = job.spec.request.gpus_per_node
            assert batch_running + wanted > 8 - QUOTA_GPUS or max(free.values()) < wanted, (
                f"batch job {job.id} fits its queue's quota and a node yet waits: {job.reason} {job.reason_detail}")
