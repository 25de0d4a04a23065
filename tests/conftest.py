"""Fixtures shared across test folders."""
from __future__ import annotations

import time

import pytest


@pytest.fixture
def utc(monkeypatch):
    """Local time is UTC for the test (texts that show local times can then be compared exactly)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
