"""Quota with cohorts (Kueue's documented examples), counted limits, preemption, advance reservations."""
from __future__ import annotations

from corral.core.config import SchedulerConfig
from corral.core.model import AdvanceReservation, Cap, QueueQuota, Reason
from corral.core.quota import QuotaBook
from corral.core.scheduler import schedule
from tests.core.builders import NOW, job, node, running, snapshot

# Kueue's ClusterQueue docs: team-a-cq nominal 9 CPUs with borrowingLimit 1, team-b-cq nominal 12, one
# cohort. With team-b idle, team-a admits up to 9 + 1 = 10; team-b may borrow up to 12 + 9 = 21.
TEAM_A = QueueQuota("team-a", {"gpu": 9}, cohort="team-ab", borrowing_limit={"gpu": 1})
TEAM_B = QueueQuota("team-b", {"gpu": 12}, cohort="team-ab")


def test_kueue_borrowing_limit_example() -> None:
    book = QuotaBook([TEAM_A, TEAM_B], [])
    assert book.shortfall("team-a", {"gpu": 10}) is None
    assert "borrowing limit" in book.shortfall("team-a", {"gpu": 11})
    assert book.shortfall("team-b", {"gpu": 21}) is None
    assert book.shortfall("team-b", {"gpu": 22}) is not None


def test_kueue_lending_limit_keeps_a_guaranteed_part() -> None:
    # KEP-1224: a queue lends at most lendingLimit of its nominal quota; the rest stays its own.
    lender = QueueQuota("lender", {"gpu": 9}, cohort="c", lending_limit={"gpu": 4})
    borrower = QueueQuota("borrower", {"gpu": 0}, cohort="c")
    book = QuotaBook([lender, borrower], [])
    assert book.shortfall("borrower", {"gpu": 4}) is None
    assert book.shortfall("borrower", {"gpu": 5}) is not None
    book.charge("borrower", {"gpu": 4})
    assert book.shortfall("lender", {"gpu": 5}) is None, "the guaranteed 5 stay available to the lender"
    assert book.shortfall("lender", {"gpu": 6}) is not None


def test_queue_without_cohort_is_held_to_nominal() -> None:
    solo = QueueQuota("solo", {"gpu": 2})
    nodes = [node("n1", gpus=8)]
    plan = schedule(snapshot(nodes, [job(1, gpus=2, queue="solo"), job(2, gpus=1, queue="solo")], queues=[solo]))
    assert [s.job_id for s in plan.starts] == [1]
    (wait,) = plan.waiting
    assert wait.reason is Reason.QUEUE_QUOTA and "nominal quota 2" in wait.detail


def test_borrowing_then_reclaim_by_preemption() -> None:
    a = QueueQuota("a", {"gpu": 4}, cohort="c")
    b = QueueQuota("b", {"gpu": 4}, cohort="c")
    nodes = [node("n1", gpus=8)]
    # b borrowed all 8 GPUs while a was idle.
    runs = [running(10, 600, ("n1", (0, 1, 2, 3)), queue="b", preemptible_from=NOW - 1),
            running(11, 600, ("n1", (4, 5, 6, 7)), queue="b", preemptible_from=NOW - 1, start_time=NOW - 10)]
    plan = schedule(snapshot(nodes, [job(1, gpus=4, queue="a")], runs, queues=[a, b]))
    assert plan.starts == ()
    assert [(p.victim_id, p.cause) for p in plan.preemptions] == [(11, "reclaim")], "one victim, the newest"
    # Next cycle: the victim is stopping: nobody else is preempted while it exits.
    stopping = [runs[0], running(11, 5, ("n1", (4, 5, 6, 7)), queue="b", completing=True)]
    again = schedule(snapshot(nodes, [job(1, gpus=4, queue="a")], stopping, queues=[a, b]))
    assert again.preemptions == () and again.waiting[0].reason is Reason.RESOURCES


def test_no_reclaim_beyond_nominal_and_no_useless_victims() -> None:
    a = QueueQuota("a", {"gpu": 4}, cohort="c")
    b = QueueQuota("b", {"gpu": 4}, cohort="c")
    nodes = [node("n1", gpus=8)]
    runs = [running(10, 600, ("n1", tuple(range(8))), queue="b", preemptible_from=NOW - 1)]
    # a asks for 6: beyond its nominal 4, so it may not reclaim.
    plan = schedule(snapshot(nodes, [job(1, gpus=6, queue="a")], runs, queues=[a, b]))
    assert plan.preemptions == ()


def test_qos_preemption_takes_whole_gangs_and_respects_min_runtime() -> None:
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    runs = [
        running(10, 900, ("n1", (0, 1)), ("n2", (0, 1)), qos="low", preemptible_from=NOW - 1, priority=1),
        running(11, 900, ("n1", (2, 3)), ("n2", (2, 3)), qos="low", preemptible_from=NOW + 60, priority=0),
    ]
    urgent = job(1, nodes=2, gpus=2, qos="high", preempts_qos=frozenset({"low"}), priority=100)
    plan = schedule(snapshot(nodes, [urgent], runs))
    assert [(p.victim_id, p.cause) for p in plan.preemptions] == [(10, "priority")]
    too_big = job(2, nodes=2, gpus=4, qos="high", preempts_qos=frozenset({"low"}), priority=100)
    plan = schedule(snapshot(nodes, [too_big], runs))
    assert plan.preemptions == (), "job 11 is inside its minimum runtime: preempting 10 alone would not help"


def test_counted_limits_hold_within_one_cycle() -> None:
    nodes = [node("n1", gpus=8)]
    cap = Cap("user:alice:running", 2, 1, Reason.ASSOC_MAX_JOBS)
    runs = [running(10, 600, ("n1", (0,)), charges=(("user:alice:running", 1),))]
    plan = schedule(snapshot(nodes, [job(i, caps=(cap,)) for i in (1, 2, 3)], runs))
    assert [s.job_id for s in plan.starts] == [1]
    assert {w.job_id: w.reason for w in plan.waiting} == {2: Reason.ASSOC_MAX_JOBS, 3: Reason.ASSOC_MAX_JOBS}


def test_array_throttle_is_a_counted_limit() -> None:
    cap = Cap("array:7", 2, 1, Reason.ARRAY_TASK_LIMIT)
    plan = schedule(snapshot([node("n1", gpus=8)], [job(i, caps=(cap,)) for i in range(1, 6)]))
    assert len(plan.starts) == 2
    assert all(w.reason is Reason.ARRAY_TASK_LIMIT for w in plan.waiting)


def test_advance_reservation_keeps_others_off_and_lets_members_in() -> None:
    nodes = [node("n1", gpus=4), node("n2", gpus=4)]
    maint = AdvanceReservation("maint", NOW + 600, NOW + 3600, frozenset({"n1"}), maintenance=True)
    resv = AdvanceReservation("lab", NOW - 10, NOW + 7200, frozenset({"n2"}))
    pending = [job(1, gpus=4, limit_s=3600), job(2, gpus=4, limit_s=300), job(3, gpus=4, reservation="lab")]
    plan = schedule(snapshot(nodes, pending, reservations=[maint, resv]))
    placed = {s.job_id: s.slices[0].node for s in plan.starts}
    assert placed == {2: "n1", 3: "n2"}, "job 1 would overlap the maintenance; job 2 ends before it"
    (wait,) = plan.waiting
    assert wait.job_id == 1 and wait.estimated_start == NOW + 3600


def test_reservation_not_open_yet_waits() -> None:
    resv = AdvanceReservation("later", NOW + 100, NOW + 7200, frozenset({"n1"}))
    plan = schedule(snapshot([node("n1")], [job(1, reservation="later", limit_s=600)], reservations=[resv]),
                    SchedulerConfig(max_reservations=0))
    assert plan.starts == () and plan.waiting[0].job_id == 1


def test_reclaim_never_cuts_into_the_lenders_nominal_quota() -> None:
    a = QueueQuota("a", {"gpu": 8}, cohort="c")
    b = QueueQuota("b", {"gpu": 8}, cohort="c")
    nodes = [node("n1", gpus=8), node("n2", gpus=8)]
    # b uses 12 (borrows 4); a uses 4 and asks for 4 more, within its nominal 8: one b job of 4 goes.
    runs = [running(10, 600, ("n1", (0, 1, 2, 3)), queue="b", preemptible_from=NOW - 1),
            running(11, 600, ("n1", (4, 5, 6, 7)), queue="b", preemptible_from=NOW - 1),
            running(12, 600, ("n2", (0, 1, 2, 3)), queue="b", preemptible_from=NOW - 1),
            running(13, 600, ("n2", (4, 5, 6, 7)), queue="a")]
    plan = schedule(snapshot(nodes, [job(1, gpus=8, queue="a")], runs, queues=[a, b]))
    assert plan.preemptions == (), "8 more would need b below its nominal 8"
    plan = schedule(snapshot(nodes, [job(1, gpus=4, queue="a")], runs, queues=[a, b]))
    assert len(plan.preemptions) == 1


def _model_node(name: str, model: str, gpus: int = 4):
    from dataclasses import replace

    view = node(name, gpus=gpus)
    return replace(view, gpus=tuple(replace(g, model=model) for g in view.gpus))


def test_gpu_model_flavors_are_tried_in_order_and_charged_per_model() -> None:
    # Kueue flavors: the queue prefers A100 quota, falls back to T4 quota.
    flavored = QueueQuota("q", {"gpu:A100": 4, "gpu:T4": 8})
    nodes = [_model_node("a1", "A100"), _model_node("t1", "T4"), _model_node("t2", "T4")]
    pending = [job(1, gpus=4, queue="q"), job(2, gpus=4, queue="q"), job(3, gpus=4, queue="q"),
               job(4, gpus=4, queue="q")]
    plan = schedule(snapshot(nodes, pending, queues=[flavored]))
    placed = {s.job_id: s.slices[0].node for s in plan.starts}
    assert placed == {1: "a1", 2: "t1", 3: "t2"}
    (wait,) = plan.waiting
    assert wait.reason is Reason.QUEUE_QUOTA and "gpu:A100" in wait.detail and "gpu:T4" in wait.detail


def test_flavors_and_constraints_name_nvml_devices_by_their_slurm_type() -> None:
    # Agents report NVML's names; quota flavors and --gres types use Slurm's short types, any case.
    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    flavored = QueueQuota("q", {"gpu:h100": 8, "gpu:a100": 4})
    nodes = [_model_node("h1", h100, gpus=8), _model_node("a1", a100, gpus=8)]
    runs = [running(10, 600, ("h1", (0, 1, 2, 3)), queue="q", gpu_model=h100)]
    from dataclasses import replace

    def constrained(job_id: int, model: str):
        pending = job(job_id, gpus=4, queue="q")
        return replace(pending, request=replace(pending.request, gpu_model=model))

    pending = [job(1, gpus=4, queue="q"), constrained(2, "H100"), constrained(3, "a100")]
    plan = schedule(snapshot(nodes, pending, runs, queues=[flavored]))
    assert {s.job_id: s.slices[0].node for s in plan.starts} == {1: "h1", 3: "a1"}
    (wait,) = plan.waiting
    # The running job's 4 GPUs of the H100 node count against gpu:h100: 4 + 4 (job 1) + 4 > 8.
    assert wait.job_id == 2 and wait.reason is Reason.QUEUE_QUOTA and "gpu:h100 8+4" in wait.detail
    book = QuotaBook([flavored], runs)
    assert book.usage["q"] == {"gpu:h100": 4, "gpu:a100": 0}


def test_gpu_model_constraint_without_queue() -> None:
    nodes = [_model_node("a1", "A100"), _model_node("t1", "T4")]
    pending = [job(1, gpus=2)]
    from dataclasses import replace

    constrained = replace(pending[0], request=replace(pending[0].request, gpu_model="T4"))
    plan = schedule(snapshot(nodes, [constrained]))
    assert plan.starts[0].slices[0].node == "t1"
    impossible = replace(pending[0], request=replace(pending[0].request, gpu_model="H100"))
    plan = schedule(snapshot(nodes, [impossible]))
    assert plan.waiting[0].reason is Reason.PARTITION_NODE_LIMIT


def test_a_borrower_does_not_preempt_a_lender_within_nominal_by_qos() -> None:
    # Found by the replay-equivalence workload: "high" (queue b, borrowing) preempted a normal job of
    # queue a (within nominal) by QOS, a reclaimed it at once, and the two preempted each other for ever.
    a = QueueQuota("a", {"gpu": 4}, cohort="c")
    b = QueueQuota("b", {"gpu": 4}, cohort="c")
    nodes = [node("n1", gpus=8)]
    runs = [running(10, 600, ("n1", (0, 1, 2, 3)), queue="a", qos="normal", preemptible_from=NOW - 1),
            running(11, 600, ("n1", (4, 5, 6, 7)), queue="b", qos="normal", preemptible_from=NOW - 1)]
    high = job(1, gpus=4, queue="b", qos="high", preempts_qos=frozenset({"normal"}))
    plan = schedule(snapshot(nodes, [high], runs, queues=[a, b]))
    assert [(p.victim_id, p.cause) for p in plan.preemptions] == [(11, "priority")], \
        "only its own queue's job: queue a is within nominal"
    # With queue a borrowing (b idle), the high job of b, within nominal, takes a's borrowed part back.
    runs = [running(10, 600, ("n1", (0, 1, 2, 3)), queue="a", qos="normal", preemptible_from=NOW - 1),
            running(12, 600, ("n1", (4, 5, 6, 7)), queue="a", qos="normal", preemptible_from=NOW - 1)]
    plan = schedule(snapshot(nodes, [high], runs, queues=[a, b]))
    assert [p.cause for p in plan.preemptions] == ["reclaim"]
    # Without quota queues, QOS preemption is Slurm's: any lower QOS job.
    plain = job(1, gpus=8, qos="high", preempts_qos=frozenset({"normal"}))
    runs = [running(10, 600, ("n1", (0, 1, 2, 3)), qos="normal", preemptible_from=NOW - 1),
            running(11, 600, ("n1", (4, 5, 6, 7)), qos="normal", preemptible_from=NOW - 1)]
    assert {p.victim_id for p in schedule(snapshot(nodes, [plain], runs)).preemptions} == {10, 11}
