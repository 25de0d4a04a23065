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
