import signal
import time

import pytest


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Slurm prints local time, and the golden fixtures were recorded with TZ=UTC (record_golden.py):
    the tests read and write times in that zone, whatever the machine's."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """One real controller with two agents (2 nodes x 4 GPUs) shared by a test module: each test
    submits its own jobs and looks only at those."""
    from tests.e2e.harness import Cluster

    cluster = Cluster(tmp_path_factory.mktemp("corral"), nodes=2, gpus=4).start()
    yield cluster
    # SIGKILL: on SIGTERM the controller waits ~4 s for the agents' long polls; nothing here needs
    # a clean shutdown (the database lives in a temporary directory).
    cluster.kill_controller()
    cluster.stop()


@pytest.fixture
def cmd(slurm_cluster, tmp_path):
    from .commands import Commands

    return Commands(slurm_cluster, tmp_path)


@pytest.fixture(autouse=True)
def signal_dispositions_restored():
    """The commands run in-process here; `scontrol requeue` ignores SIGTERM in its own process (a job
    requeues itself and must outlive its kill). Left ignored, the test process would hand that on to
    every task later tests start, and a task could no longer trap SIGTERM."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)
