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
