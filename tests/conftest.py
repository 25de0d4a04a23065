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


@pytest.fixture
def standins():
    """make(role, leader) -> a started controller stand-in (tests/ha_standin.py); all stopped afterwards."""
    from tests.ha_standin import ControllerStandIn

    started: list[ControllerStandIn] = []

    def make(role: str = "leader", leader: str | None = None) -> ControllerStandIn:
        standin = ControllerStandIn(role, leader).start()
        started.append(standin)
        return standin

    yield make
    for standin in started:
        standin.stop()
