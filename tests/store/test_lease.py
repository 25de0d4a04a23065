"""The leader lease in the database (store.lease), against real SQLite and PostgreSQL: one holder at a time,
a new epoch at every takeover, and writes fenced by the epoch in their own transaction."""
from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import pytest

from corral.store import Store, StoreError
from corral.store.lease import IDLE_IN_TRANSACTION_MS, NOT_LEADER, Holder, LeaseLost, Leases, check_fence
from tests.store.factories import full_job

TTL_S = 3.0


def holder(name: str) -> Holder:
    return Holder.this_process(f"http://{name}:6817")


def test_a_new_database_has_no_leader_and_the_first_taker_gets_epoch_1(store: Store) -> None:
    leases = Leases(store.engine)
    assert not leases.read().held and leases.read().epoch == 0
    a = holder("a")
    taken = leases.acquire(a, TTL_S)
    assert taken is not None and taken.epoch == 1 and taken.holder == a.id and taken.url == a.url
    assert taken.held and TTL_S - 0.5 < taken.expires_at - taken.db_now <= TTL_S


def test_a_held_lease_is_refused_to_another_controller(store: Store) -> None:
    leases = Leases(store.engine)
    a, b = holder("a"), holder("b")
    assert leases.acquire(a, TTL_S) is not None
    assert leases.acquire(b, TTL_S) is None
    assert leases.read().holder == a.id


def test_retaking_its_own_lease_gives_a_new_epoch(store: Store) -> None:
    leases = Leases(store.engine)
    a = holder("a")
    first = leases.acquire(a, TTL_S)
    again = leases.acquire(a, TTL_S)
    assert first is not None and again is not None and again.epoch == first.epoch + 1


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_on_postgresql_an_expired_lease_goes_to_the_next_taker(store: Store) -> None:
    leases = Leases(store.engine)
    a, b = holder("a"), holder("b")
    assert leases.acquire(a, 0.3) is not None
    assert leases.acquire(b, TTL_S) is None
    time.sleep(0.4)
    taken = leases.acquire(b, TTL_S)
    assert taken is not None and taken.epoch == 2 and taken.holder == b.id
    assert not leases.renew(1, TTL_S), "the old holder's renewal must find its epoch gone"
    assert leases.renew(2, TTL_S)


def test_a_lease_held_by_an_exited_process_of_this_host_is_free_at_once(store: Store) -> None:
    leases = Leases(store.engine)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(dead.stdout)
    mine = holder("a")
    gone = Holder(mine.id.rsplit(":", 2)[0] + f":{pid}:feed", "http://gone:6817", pid)
    assert leases.acquire(gone, 60.0) is not None  # held for a minute, by a process that is no more
    taken = leases.acquire(mine, TTL_S)
    assert taken is not None and taken.holder == mine.id and taken.epoch == 2


def test_a_released_lease_is_free_at_once(store: Store) -> None:
    leases = Leases(store.engine)
    a, b = holder("a"), holder("b")
    taken = leases.acquire(a, 60.0)
    leases.release(taken.epoch)
    assert leases.acquire(b, TTL_S).epoch == 2


def test_writes_carry_the_fence_and_fail_once_the_lease_moved(store: Store) -> None:
    leases = Leases(store.engine)
    a, b = holder("a"), holder("b")
    store.fence(leases.acquire(a, TTL_S).epoch)
    store.save(jobs=[full_job(1)])
    leases.release(1)
    assert leases.acquire(b, TTL_S).epoch == 2
    with pytest.raises(LeaseLost, match=r"epoch 2 \(http://b:6817\).*\(epoch 1\)"):
        store.save(jobs=[full_job(2)])
    changes = store.encode(jobs=[full_job(3)])
    with pytest.raises(LeaseLost):  # SQLite's try_write checks the fence; PostgreSQL's leaves it to write
        store.try_write(changes) or store.write(changes)
    with pytest.raises(LeaseLost):
        store.check_writable(1.0)
    assert store.get_job(2) is None and store.get_job(3) is None, "a fenced write wrote nothing"
    store.fence(NOT_LEADER)
    with pytest.raises(LeaseLost, match="not the leader"):
        store.save(jobs=[full_job(4)])
    store.fence(2)
    store.save(jobs=[full_job(5)])
    assert store.get_job(5) is not None


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_on_postgresql_a_takeover_waits_for_a_write_in_flight_and_then_fences_the_next(db_url: str) -> None:
    """The fence locks the lease row until the write commits: the taker's transaction comes after it."""
    with Store.open(db_url) as old, Store.open(db_url) as new:
        leases = Leases(new.engine)
        old.fence(leases.acquire(holder("old"), 0.2).epoch)
        time.sleep(0.3)  # the old leader's lease expired; it does not know yet
        with old.engine.begin() as connection:
            check_fence(connection, 1)  # a write of the old leader, in flight, holds the row
            taken: list = []
            taker = threading.Thread(target=lambda: taken.append(leases.acquire(holder("new"), TTL_S)))
            taker.start()
            time.sleep(0.3)
            assert not taken, "the takeover must wait for the write in flight"
        taker.join(5)
        assert taken and taken[0] is not None and taken[0].epoch == 2
        with pytest.raises(LeaseLost):
            old.save(jobs=[full_job(1)])


def test_the_registry_lists_controllers_with_the_lease_deciding_roles(store: Store) -> None:
    leases = Leases(store.engine)
    a, b = holder("a"), holder("b")
    leases.acquire(a, TTL_S)
    leases.heartbeat(a, "leader", 1, forget_after_s=30)
    leases.heartbeat(b, "leader", 0, forget_after_s=30)  # what b says about itself does not make it lead
    lease, controllers = leases.controllers()
    assert lease.holder == a.id
    assert [(c.url, c.role, c.epoch, c.pid) for c in controllers] == [
        (a.url, "leader", 1, a.pid), (b.url, "standby", 0, b.pid)]
    leases.forget(b)
    assert [c.url for c in leases.controllers()[1]] == [a.url]


@pytest.mark.parametrize("db_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
def test_on_postgresql_a_write_paused_mid_transaction_cannot_block_a_takeover(db_url: str) -> None:
    """A leader paused between the fence and its commit holds the lease row; the server ends its session
    once it has sat idle for IDLE_IN_TRANSACTION_MS, and the takeover goes ahead."""
    with Store.open(db_url) as old, Store.open(db_url) as new:
        leases = Leases(new.engine)
        leases.acquire(holder("old"), 0.2)
        connection = old.engine.connect()
        connection.begin()
        check_fence(connection, 1)  # and then the process stops
        started = time.monotonic()
        with pytest.raises(StoreError, match="lock timeout"):
            leases.acquire(holder("new"), TTL_S)  # waits at most LOCK_TIMEOUT_MS for the row
        time.sleep(max(0.0, IDLE_IN_TRANSACTION_MS / 1000 + 0.3 - (time.monotonic() - started)))
        taken = leases.acquire(holder("new"), TTL_S)
        assert taken is not None and taken.epoch == 2
        with contextlib.suppress(Exception):  # the server ended that session
            connection.close()
