"""The node's health checks (agent/health.py, agent/nvml_health.py): NVML's XIDs and counters, read through
the pynvml stand-in of the e2e tests (faults injected through the file $FAKE_NVML_HEALTH names), and the
operator's health-check program; each failure reaches the controller as NodeUnhealthy, and a failing check
before a job refuses its launch."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from corral.agent import __main__ as agent_main
from corral.agent.discovery import Inventory, simulated_gpus
from corral.agent.health import HealthConfig, run_program
from corral.agent.nvml_health import NvmlHealth, xid_reason
from corral.protocol import NodeFinished, NodeStarted, NodeUnhealthy

FAKE_NVML = Path(__file__).parents[1] / "e2e" / "fake_nvml"


@pytest.fixture
def fake_nvml(monkeypatch, tmp_path):
    """pynvml is the stand-in, with 2 GPUs; returns a function that writes the faults it reports."""
    monkeypatch.syspath_prepend(str(FAKE_NVML))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    health_file = tmp_path / "nvml-health.json"
    monkeypatch.setenv("FAKE_NVML_NAMES", "NVIDIA H100 80GB HBM3,NVIDIA H100 80GB HBM3")
    monkeypatch.setenv("FAKE_NVML_HEALTH", str(health_file))

    def inject(**faults) -> None:
        health_file.write_text(json.dumps(faults))

    yield inject
    sys.modules.pop("pynvml", None)  # the next importer gets the real one again


@pytest.fixture
def nvml_health(fake_nvml):
    health = NvmlHealth()
    health.open()
    yield health
    health.close()


def test_a_fatal_xid_is_a_reason_an_application_xid_is_not(fake_nvml, nvml_health):
    assert nvml_health.watches_xids
    assert nvml_health.wait_xid(50) is None, "nothing happened"
    fake_nvml(xids=[[1, 13], [1, 79]])
    assert nvml_health.wait_xid(50) is None, "XID 13 is the application's fault"
    assert nvml_health.wait_xid(50) == "XID 79 on GPU 1 (GPU has fallen off the bus)"
    assert nvml_health.wait_xid(50) is None, "each event is delivered once"
    assert xid_reason(0, 48) == "XID 48 on GPU 0 (double-bit ECC error)"


def test_uncorrected_ecc_errors_and_retired_pages_are_reasons(fake_nvml, nvml_health):
    assert nvml_health.check_counters() == []
    fake_nvml(ecc_uncorrected={"1": 3}, retired_pending=[0])
    assert nvml_health.check_counters() == ["GPU 0 has retired pages pending a reset",
                                            "3 uncorrected ECC errors on GPU 1"]
    fake_nvml(no_ecc=True, ecc_uncorrected={"1": 3})
    assert nvml_health.check_counters() == [], "a board without ECC is not unhealthy for it"


def test_remapped_rows_pending_or_failed_are_reasons(fake_nvml, nvml_health):
    fake_nvml(remapped_rows={"0": [2, 0, 1, 0], "1": [0, 1, 0, 1]})
    assert nvml_health.check_counters() == ["GPU 0 has remapped rows pending a reset",
                                            "GPU 1 failed to remap a row of its memory"]


def test_nvlink_errors_count_from_one_poll_to_the_next(fake_nvml, nvml_health):
    fake_nvml(nvlink_errors={"0": {"3": 5000}})
    assert nvml_health.check_counters() == [], "errors before the agent watched: the baseline"
    fake_nvml(nvlink_errors={"0": {"3": 5050}})
    assert nvml_health.check_counters() == [], "50 more: under the limit"
    fake_nvml(nvlink_errors={"0": {"3": 5200}})
    assert nvml_health.check_counters() == ["150 NVLink errors on link 3 of GPU 0"]


def test_a_lost_gpu_is_a_reason(fake_nvml, nvml_health):
    fake_nvml(lost=[1])
    assert nvml_health.check_counters() == ["GPU 1 is lost (NVML cannot reach it)"]


def _program(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "check"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_the_program_exit_status_and_last_line_are_the_verdict(tmp_path):
    healthy = _program(tmp_path, "echo all fine; exit 0")
    assert asyncio.run(run_program(healthy, 5, "n1")) is None
    nhc = _program(tmp_path, 'echo "checking $SLURMD_NODENAME"; '
                             'echo "ERROR:  nhc:  Health check failed:  /scratch is full" >&2; exit 1')
    assert asyncio.run(run_program(nhc, 5, "n1")) == "check: ERROR:  nhc:  Health check failed:  /scratch is full"
    silent = _program(tmp_path, "exit 3")
    assert asyncio.run(run_program(silent, 5, "n1")) == f"health check {silent} exited 3"
    slow = _program(tmp_path, "sleep 30")
    assert asyncio.run(run_program(slow, 0.2, "n1")) == f"health check {slow} timed out after 0.2s"


def test_an_injected_xid_reaches_the_controller(controller, run_with_agent, fake_nvml):
    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        fake_nvml(xids=[[1, 79]])
        await controller.until(lambda: _unhealthy(controller))

    gpus = simulated_gpus(2)
    run_with_agent(scenario, inventory=Inventory(gpus=gpus, cpus=4, mem_mib=4096, source="nvml"),
                   health=HealthConfig(nvml_interval_s=0.1))
    assert _unhealthy(controller) == ["XID 79 on GPU 1 (GPU has fallen off the bus)"]


def test_a_failing_program_reaches_the_controller_from_its_first_run(controller, run_with_agent, tmp_path):
    program = _program(tmp_path, "echo 'NHC: eth0 is down'; exit 1")

    async def scenario(agent):
        await controller.until(lambda: _unhealthy(controller))

    run_with_agent(scenario, health=HealthConfig(program=program, interval_s=60))
    assert _unhealthy(controller) == ["check: NHC: eth0 is down"]


def test_a_failing_check_before_a_job_refuses_its_launch(controller, run_with_agent, make_launch, tmp_path):
    sick = tmp_path / "sick"
    program = _program(tmp_path, f"if [ -e {sick} ]; then echo GPU memory test failed; exit 1; fi")

    async def scenario(agent):
        await controller.until(lambda: controller.polls)
        controller.send(make_launch(job_id=21, argv=["sh", "-c", "echo ran >> runs"]))
        await controller.until(lambda: controller.finished(21))
        sick.touch()
        controller.send(make_launch(job_id=22, argv=["sh", "-c", "echo ran >> runs"]))
        await controller.until(lambda: controller.finished(22))

    run_with_agent(scenario, health=HealthConfig(program=program, interval_s=0, before_job=True))
    assert (tmp_path / "runs").read_text() == "ran\n", "job 22 never started"
    assert controller.started(22) is None
    kinds = [(type(e).__name__, getattr(e, "job_id", None)) for e in controller.events]
    assert kinds[-2:] == [("NodeUnhealthy", None), ("NodeFinished", 22)], \
        "the node is reported first: the controller requeues the job rather than failing it"
    assert _unhealthy(controller) == ["check: GPU memory test failed"]
    assert controller.finished(22).error == "n1 failed its health check: check: GPU memory test failed"
    assert [type(e) for e in controller.events[:2]] == [NodeStarted, NodeFinished]


def _unhealthy(controller) -> list[str]:
    return [e.reason for e in controller.events if isinstance(e, NodeUnhealthy)]


def test_the_agent_refuses_health_options_that_cannot_work(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.write_text("s\n")
    base = ["--controller", "http://127.0.0.1:1", "--secret-file", str(secret), "--node", "n1", "--gpus", "0"]
    for extra, message in [
            (["--health-before-job"], "--health-before-job needs --health-program"),
            (["--health-program", str(tmp_path / "none")], "is not an executable file"),
            (["--health-program", "/bin/true", "--health-interval", "soon"], "'soon' is not a number of seconds"),
            (["--health-program", "/bin/true", "--health-timeout", "0"], "--health-timeout must be more than 0")]:
        with pytest.raises(SystemExit):
            agent_main.main([*base, *extra])
        assert message in capsys.readouterr().err, extra
