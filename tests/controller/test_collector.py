"""Python's collector in the controller's process (corral/collector.py): settled once an engine is built,
so that scheduling cycles do not walk the restored state; an engine replaced later is still collected."""
from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from corral import collector
from corral.controller.__main__ import build_app
from corral.engine.config import EngineConfig
from corral.protocol import API_PREFIX
from corral.store import Store
from tests.cli.standin import ServerThread

SECRET = "cyclegc-secret"


@pytest.fixture(autouse=True)
def _restored_collector() -> Iterator[None]:
    """Each test starts with nothing frozen and leaves the test process's collector as it found it."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


class _Node:
    """A reference cycle: only the collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_settle_freezes_what_exists_and_raises_the_thresholds() -> None:
    kept = _Node()
    collector.settle()
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == collector.THRESHOLDS
    assert not any(o is kept for o in gc.get_objects())  # frozen: in no generation a collection walks
    del kept


def test_a_settle_collects_a_cycle_the_one_before_froze() -> None:
    old_engine = _Node()
    gone = weakref.ref(old_engine)
    collector.settle()
    del old_engine
    gc.collect()
    assert gone() is not None  # frozen: a plain collection does not free it
    collector.settle()
    assert gone() is None


def test_the_controller_settles_once_its_engine_is_built(tmp_path: Path) -> None:
    build_app(EngineConfig(), Store.open(f"sqlite:///{tmp_path / 'plain.db'}"), SECRET)
    assert gc.get_freeze_count() == 0  # an app built inside another process leaves its collector alone
    build_app(EngineConfig(), Store.open(f"sqlite:///{tmp_path / 'corral.db'}"), SECRET, settle_heap=True)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == collector.THRESHOLDS


def test_a_controller_taking_the_lease_settles_after_building_its_engine(tmp_path: Path) -> None:
    store = Store.open(f"sqlite:///{tmp_path / 'corral.db'}")
    app = build_app(EngineConfig(), store, SECRET, advertise_url="http://127.0.0.1:1", settle_heap=True)
    assert gc.get_freeze_count() == 0  # no engine before the lease
    with ServerThread(app, lifespan="on") as server:
        deadline = time.monotonic() + 20
        while gc.get_freeze_count() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gc.get_freeze_count() > 0
        reply = httpx.get(server.url + API_PREFIX + "/jobs", headers={"Authorization": f"Bearer {SECRET}"},
                          trust_env=False, timeout=10)
        assert reply.status_code == 200, reply.text  # it leads, with the engine it settled after
