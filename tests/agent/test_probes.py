"""Service replicas' probes (agent/probes.py) through a real agent, a real HTTP app as the replica and the fake
controller: startup protects a slow starter, readiness follows the app, liveness failures are reported after
their threshold with the detail, and only flips are sent."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest

from corral.agent.checks import CheckResult
from corral.agent.probes import ProbeState
from corral.protocol import (
    ExecCheckSpec,
    HttpCheckSpec,
    NodeFinished,
    NodeStarted,
    PortRequest,
    ProbeSpec,
    ProbesReported,
    ProbesSpec,
    ProbeStatus,
    SignalJob,
    TcpCheckSpec,
)

APP = Path(__file__).with_name("probe_app.py")
FAST = dict(period_s=0.1, timeout_s=0.5)


def http(path: str, **timing) -> ProbeSpec:
    return ProbeSpec(http=HttpCheckSpec(path=path, port="http"), **{**FAST, **timing})


def replica(make_launch, tmp_path: Path, job_id: int, probes: ProbesSpec, delay_s: float = 0.0, **fields):
    argv = [sys.executable, str(APP), "--delay", str(delay_s), "--status", str(tmp_path / "status")]
    return make_launch(job_id=job_id, argv=argv, ports=[PortRequest(name="http")], probes=probes, **fields)


def reports(controller, job_id: int) -> list[ProbesReported]:
    return controller.events_of(ProbesReported, job_id)


def flips(controller, job_id: int) -> list[tuple[str, bool]]:
    return [(r.probe, r.ok) for report in reports(controller, job_id) for r in report.results]


def set_status(tmp_path: Path, path: str, status: int) -> None:
    (tmp_path / "status").mkdir(exist_ok=True)
    (tmp_path / "status" / path.strip("/")).write_text(str(status))


# -- the thresholds, as a table


@pytest.mark.parametrize(("name", "success", "failure", "results", "want"), [
    # readiness starts failed: it passes after `success` successes in a row
    ("readiness", 2, 3, "+-++", [None, None, None, ("ok", 2)]),
    ("readiness", 1, 3, "+---", [("ok", 1), None, None, ("failed", 3)]),
    # liveness starts passing: only `failure` failures in a row fail it; a success in between resets the run
    ("liveness", 1, 3, "--+---", [None, None, None, None, None, ("failed", 3)]),
    ("liveness", 1, 2, "--+", [None, ("failed", 2), ("ok", 1)]),
    # startup is undecided: either way it flips
    ("startup", 1, 2, "-+", [None, ("ok", 1)]),
    ("startup", 1, 2, "--", [None, ("failed", 2)]),
])
def test_a_probe_flips_only_after_its_threshold_in_a_row(name, success, failure, results, want):
    state = ProbeState.initial(name, ProbeSpec(exec=ExecCheckSpec(command=["true"]), success_threshold=success,
                                               failure_threshold=failure))
    got = []
    for mark in results:
        flip = state.observe(CheckResult(mark == "+", "HTTP 200" if mark == "+" else "HTTP 500"))
        got.append(None if flip is None else ("ok" if flip.ok else "failed", flip.consecutive))
    assert got == want


def test_a_failed_liveness_or_startup_probe_restarts_a_failed_readiness_probe_does_not():
    def failed(name: str) -> ProbeStatus:
        state = ProbeState.initial(name, ProbeSpec(tcp=TcpCheckSpec(port="http"), failure_threshold=1))
        if name == "readiness":
            state.observe(CheckResult(True))
        flip = state.observe(CheckResult(False, "connection refused"))
        assert flip is not None
        return flip

    assert failed("liveness").restart and failed("startup").restart
    assert not failed("readiness").restart


# -- through the agent


def test_startup_waits_for_a_slow_starter_then_readiness_and_liveness_follow_the_app(controller, run_with_agent,
                                                                                   make_launch, tmp_path):
    """The app listens only after 1.5 s; liveness would fail it after 0.3 s, but it waits for startup."""
    probes = ProbesSpec(startup=http("/ready", failure_threshold=100),
                        readiness=http("/ready", success_threshold=2),
                        liveness=http("/live", failure_threshold=3))
    launched: dict[str, float] = {}

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        launched["at"] = time.monotonic()
        controller.send(replica(make_launch, tmp_path, 51, probes, delay_s=1.5, restart_count=2))
        await controller.until(lambda: ("readiness", True) in flips(controller, 51), timeout_s=10)
        launched["ready"] = time.monotonic()
        set_status(tmp_path, "/ready", 503)
        await controller.until(lambda: ("readiness", False) in flips(controller, 51), timeout_s=5)
        set_status(tmp_path, "/ready", 200)
        await controller.until(lambda: flips(controller, 51).count(("readiness", True)) == 2, timeout_s=5)
        set_status(tmp_path, "/live", 500)
        await controller.until(lambda: ("liveness", False) in flips(controller, 51), timeout_s=5)
        controller.send(SignalJob(job_id=51, signal=15, grace_s=1))
        await controller.until(lambda: controller.finished(51), timeout_s=5)

    run_with_agent(scenario)
    assert launched["ready"] - launched["at"] >= 1.5, "not ready before the app listens"
    assert flips(controller, 51) == [("startup", True), ("readiness", True), ("readiness", False),
                                     ("readiness", True), ("liveness", False)], "only flips are sent"
    startup, ready, unready, _, dead = reports(controller, 51)
    assert startup.results[0].detail == "HTTP 200" and not startup.ready, "ready waits for the readiness probe"
    assert (ready.ready, ready.results[0].consecutive) == (True, 2)
    assert unready.results[0] == ProbeStatus(probe="readiness", ok=False, consecutive=3, detail="HTTP 503")
    assert not unready.ready
    assert dead.results[0] == ProbeStatus(probe="liveness", ok=False, consecutive=3, detail="HTTP 500", restart=True)
    assert {r.restart_count for r in reports(controller, 51)} == {2}, "each report names the run it is about"


def test_a_startup_probe_that_fails_asks_for_a_restart_and_probing_stops(controller, run_with_agent, make_launch,
                                                                        tmp_path):
    probes = ProbesSpec(startup=http("/", failure_threshold=3), liveness=http("/"))

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(replica(make_launch, tmp_path, 52, probes, delay_s=60))
        await controller.until(lambda: reports(controller, 52), timeout_s=5)
        await asyncio.sleep(0.5)  # long enough for several more periods: nothing more may come
        controller.send(SignalJob(job_id=52, signal=9, grace_s=1))
        await controller.until(lambda: controller.finished(52), timeout_s=5)

    run_with_agent(scenario)
    [report] = reports(controller, 52)
    assert report.results == [ProbeStatus(probe="startup", ok=False, consecutive=3, detail="connection refused",
                                          restart=True)]
    assert not report.ready


def test_tcp_and_exec_probes_and_a_replica_ready_once_startup_passed(controller, run_with_agent, make_launch,
                                                                     tmp_path):
    """No readiness probe: ready once startup passed. The exec probe runs in the replica's workdir and sees its
    ports; a check that overruns its timeout counts as a failure."""
    probes = ProbesSpec(startup=ProbeSpec(tcp=TcpCheckSpec(port="http"), **FAST),
                        liveness=ProbeSpec(exec=ExecCheckSpec(command=[
                            "sh", "-c", 'if [ -e stuck ]; then sleep 5; fi; test -n "$CORRAL_PORT_HTTP"']),
                            period_s=0.1, timeout_s=0.3, failure_threshold=2))

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(replica(make_launch, tmp_path, 53, probes))
        await controller.until(lambda: reports(controller, 53), timeout_s=5)
        await asyncio.sleep(0.5)
        (tmp_path / "stuck").touch()
        await controller.until(lambda: len(reports(controller, 53)) == 2, timeout_s=5)
        controller.send(SignalJob(job_id=53, signal=9, grace_s=1))
        await controller.until(lambda: controller.finished(53), timeout_s=5)

    run_with_agent(scenario)
    started, dead = reports(controller, 53)
    port = controller.started(53).ports["http"]
    assert started.results == [ProbeStatus(probe="startup", ok=True, consecutive=1, detail=f"connected to port {port}")]
    assert started.ready
    assert dead.results == [ProbeStatus(probe="liveness", ok=False, consecutive=2, detail="timed out after 0.3 s",
                                        restart=True)]


def test_a_batch_job_has_no_ports_and_no_probes(controller, run_with_agent, make_launch, tmp_path):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=54, argv=["sh", "-c", "env > env.txt"]))
        await controller.until(lambda: controller.finished(54))

    run_with_agent(scenario)
    assert controller.started(54).ports == {}
    assert not [e for e in controller.events if isinstance(e, ProbesReported)]
    env = (tmp_path / "env.txt").read_text()
    assert "CORRAL_PORT_" not in env and "\nPORT=" not in env
    assert [type(e) for e in controller.events] == [NodeStarted, NodeFinished]


def test_no_probe_runs_before_its_initial_delay(controller, run_with_agent, make_launch, tmp_path):
    """The app answers at once; readiness may pass only once its 1 s initial delay is over."""
    probes = ProbesSpec(readiness=http("/", initial_delay_s=1.0))
    at: dict[str, float] = {}

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(replica(make_launch, tmp_path, 55, probes))
        await controller.until(lambda: controller.started(55))
        at["started"] = time.monotonic()
        await controller.until(lambda: reports(controller, 55), timeout_s=5)
        at["ready"] = time.monotonic()
        controller.send(SignalJob(job_id=55, signal=9, grace_s=1))
        await controller.until(lambda: controller.finished(55), timeout_s=5)

    run_with_agent(scenario)
    assert at["ready"] - at["started"] >= 0.9, at  # started is seen a little after the agent's clock began
    assert reports(controller, 55)[0].ready
