"""`corral advise`: the report it builds from records and the live configuration's bodies, its advice, and
its errors (the run against a real cluster is tests/e2e/test_advise.py)."""
from __future__ import annotations

import pytest

from corral.cli.advise import build_report
from corral.cli.errors import CliError
from tests.sim.accounting_records import HOUR, T0, live_bodies, overloaded_queue, record

SAMPLED_IDLE = {"nodes": 1, "samples": 10, "interval_s": 30.0, "rss_kib": 0, "max_rss_kib": 0,
                "max_rss_node": "node1", "ave_rss_kib": 0, "cpu_s": 1.0, "gpus": 4, "gpu_util_pct": 0.0,
                "max_gpu_util_pct": 1.0, "ave_gpu_util_pct": 1.0, "max_gpu_mem_mib": 0, "ave_gpu_mem_mib": 0,
                "gpu_idle_s": HOUR}


def test_the_report_recommends_lending_to_the_overloaded_queue_with_its_evidence():
    report = build_report(overloaded_queue(), live_bodies(), T0, T0 + 24 * HOUR, None, 20_000)
    scenarios = {row["key"]: row for row in report["whatif"]["scenarios"]}
    assert list(scenarios) == ["actual", "baseline", "lending", "fgd", "exact-limits"]
    assert scenarios["actual"]["mean_wait_s"] == scenarios["baseline"]["mean_wait_s"] == 9.5 * HOUR
    assert scenarios["lending"]["mean_wait_s"] == 4.5 * HOUR
    evidence = report["whatif"]["evidence"]
    assert (evidence["jobs"], evidence["from"], evidence["to"], evidence["gpus"]) == (20, T0, T0 + 20 * HOUR, 8)
    [advice] = report["recommendations"]
    assert advice.startswith("cohort lending between qa, qb: mean wait 9.5 h -> 4.5 h (53 % lower)")


def test_nothing_is_recommended_for_a_cluster_where_jobs_start_at_once():
    records = [record(i + 1, i * HOUR, i * HOUR, HOUR / 2, gpus=2, limit_s=2700) for i in range(10)]
    report = build_report(records, live_bodies(), T0, T0 + 12 * HOUR, None, 20_000)
    assert report["recommendations"] == []
    assert report["summary"]["waits"]["overall"]["mean_s"] == 0


def test_jobs_flagged_idle_holding_a_large_share_are_called_out():
    records = [record(1, 0, 0, 2 * HOUR, usage=SAMPLED_IDLE, gpu_idle_flagged=True),
               record(2, 0, 0, 2 * HOUR, user="bob", account="b", queue="qb")]
    report = build_report(records, live_bodies(), T0, T0 + 2 * HOUR, None, 20_000)
    assert report["recommendations"] == [
        "idle GPUs: 1 job(s) flagged idle held 4.0 of 16.0 GPU-hours (25 %) with their GPUs under 5 % (most: "
        "alice). Change: gpu_idle_cancel_s (e.g. 3600) cancels such jobs"]


def test_an_account_counts_its_own_jobs_and_one_without_finished_jobs_is_told_so():
    records = overloaded_queue(4) + [record(10, 0, 0, HOUR, user="bob", account="b", queue="qb")]
    report = build_report(records, live_bodies(), T0, T0 + 5 * HOUR, "b", 20_000)
    assert report["summary"]["period"]["jobs"] == 1
    assert report["whatif"]["evidence"]["jobs"] == 5  # the replay runs every job ...
    assert {row["jobs"] for row in report["whatif"]["scenarios"]} == {1}  # ... and counts b's
    with pytest.raises(CliError, match="^no finished jobs of account nobody since "):
        build_report(records, live_bodies(), T0, T0 + 5 * HOUR, "nobody", 20_000)


def test_jobs_todays_configuration_refuses_are_counted_and_stop_the_advice():
    """Jobs that ran before the tenancy named their user replayed as 0 jobs, and nothing said why."""
    records = [record(i + 1, i * 60, i * 60 + 1, 30, user="root", account="default", queue="") for i in range(5)]
    report = build_report(records, live_bodies(), T0, T0 + HOUR, None, 20_000)
    baseline = next(row for row in report["whatif"]["scenarios"] if row["key"] == "baseline")
    assert (baseline["jobs"], baseline["refused"], baseline["unfinished"]) == (0, 5, 0)
    problem = report["whatif"]["fidelity_problem"]
    assert problem.startswith("the live configuration refuses 5 (e.g. ") and "of the 5 jobs replayed" in problem
    assert "root" in problem and report["recommendations"] == []


def test_the_replay_is_capped_and_says_so():
    report = build_report(overloaded_queue(), live_bodies(), T0, T0 + 24 * HOUR, None, 5)
    assert report["whatif"]["evidence"]["jobs"] == 5
    assert report["whatif"]["evidence"]["notes"][0] == "only the newest 5 of 20 finished jobs replayed"


def test_an_unreachable_controller_and_a_future_since_are_errors(cli, isolated):
    unreachable = cli("advise", "--url", "http://127.0.0.1:9")
    assert unreachable.exit_code == 1
    assert "corral: error: cannot reach the controller at http://127.0.0.1:9" in unreachable.output
    ahead = cli("advise", "--since", "2999-01-01")
    assert ahead.exit_code == 1 and "corral: error: --since '2999-01-01' is not in the past" in ahead.output


def test_no_what_if_advice_when_the_baseline_replay_does_not_follow_the_cluster():
    # The records say all 20 jobs started at once: the live configuration (4 GPUs for qa) cannot have run
    # them so; its replay queues them for hours, and lending would "help" only in the replay.
    records = [record(i + 1, 0, 0, HOUR) for i in range(20)]
    report = build_report(records, live_bodies(), T0, T0 + 24 * HOUR, None, 20_000)
    scenarios = {row["key"]: row for row in report["whatif"]["scenarios"]}
    assert scenarios["actual"]["mean_wait_s"] == 0 and scenarios["baseline"]["mean_wait_s"] == 9.5 * HOUR
    assert scenarios["lending"]["mean_wait_s"] == 4.5 * HOUR
    assert report["recommendations"] == []
    assert report["whatif"]["fidelity_problem"] == (
        "the replay of the live configuration waits 9.5 h on average where the jobs really waited 0 s: it does "
        "not follow this cluster closely enough to advise on (were the configuration, the nodes or the users "
        "different in this period?)")


def test_a_history_of_which_nothing_can_be_replayed_is_an_error():
    records = [record(1, 0, 0, 60, gpu_share="shard:99999999")]
    with pytest.raises(CliError, match="can be replayed: 1 job.s. not replayed: their request is not one"):
        build_report(records, live_bodies(), T0, T0 + HOUR, None, 20_000)
