"""save(): insert-or-update of jobs and nodes, all in one transaction."""
from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.exc import OperationalError

from corral.core.model import NodeSlice
from corral.engine.records import JobState, NodeRun
from corral.store import Store, StoreError
from tests.store.factories import full_job, full_node, pending_job


def test_save_updates_existing_rows(store: Store) -> None:
    job = pending_job(1)
    node = full_node("gpu001")
    store.save(jobs=[job], nodes=[node])

    job.state = JobState.RUNNING
    job.start_time = job.submit_time + 10.0
    job.slices = (NodeSlice(node="gpu001", gpus=(3,), cpus=2, mem_mib=100),)
    job.runs = {"gpu001": NodeRun(started=True)}
    node.up = False
    node.drain = False
    node.partitions = frozenset({"other"})
    store.save(jobs=[job], nodes=[node])

    assert store.get_job(1) == job
    assert store.load_nodes() == [node]
    assert store.max_job_id() == 1


def test_save_positional_arguments_and_generators(store: Store) -> None:
    store.save((pending_job(i) for i in range(1, 4)), iter([full_node("n1")]))
    assert [job.id for job in store.query_jobs()] == [1, 2, 3]
    assert [node.name for node in store.load_nodes()] == ["n1"]


def test_save_nothing_is_a_no_op(store: Store) -> None:
    store.save()
    store.save(jobs=[], nodes=[])
    assert store.max_job_id() == 0 and store.load_nodes() == []


def test_last_copy_of_a_record_in_one_save_wins(store: Store) -> None:
    first = pending_job(5)
    second = replace(first, state=JobState.CANCELLED, end_time=first.submit_time + 1)
    store.save(jobs=[first, second], nodes=[full_node("a"), replace(full_node("a"), cpus=1)])
    assert store.get_job(5) == second
    assert store.load_nodes()[0].cpus == 1


def test_large_batch(store: Store) -> None:
    jobs = [full_job(i) for i in range(1, 2501)]
    store.save(jobs=jobs)
    assert store.query_jobs() == jobs


def test_gpu_seconds_and_nodelist_are_stored_for_accounting(store: Store) -> None:
    job = full_job(9)
    store.save(jobs=[job])
    with store.engine.connect() as connection:
        row = connection.exec_driver_sql("SELECT gpu_seconds, nodelist, priority, time_limit_s FROM jobs").one()
    assert row.gpu_seconds == job.gpu_seconds > 0
    assert row.nodelist == "gpu[001-002]"
    assert (row.priority, row.time_limit_s) == (42, 7200)


def test_failed_save_writes_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.save(jobs=[pending_job(1)])
    changed = replace(pending_job(1), state=JobState.FAILED)

    def fail(*_args: object) -> None:
        raise OperationalError("INSERT INTO nodes", {}, Exception("disk I/O error"))

    # The jobs statement runs, then the nodes statement fails: the jobs must roll back too.
    monkeypatch.setattr(store._upsert_nodes, "execute", fail)
    with pytest.raises(StoreError, match="saving failed.*disk I/O error"):
        store.save(jobs=[changed, pending_job(2)], nodes=[full_node()])
    monkeypatch.undo()

    assert store.get_job(1) == pending_job(1)
    assert store.get_job(2) is None
    store.save(jobs=[changed])  # the store still works afterwards
    assert store.get_job(1) == changed


def test_cluster_meta(store: Store) -> None:
    assert store.get_meta("cluster_name") is None
    store.set_meta("cluster_name", "alpha")
    store.set_meta("cluster_name", "beta")
    assert store.get_meta("cluster_name") == "beta"


def test_meta_is_saved_in_the_same_transaction(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_args: object) -> None:
        raise OperationalError("INSERT INTO cluster_meta", {}, Exception("disk I/O error"))

    monkeypatch.setattr(store._upsert_meta, "execute", fail)
    with pytest.raises(StoreError, match="saving failed"):
        store.save(jobs=[pending_job(1)], meta={"fairshare": "{}"})
    monkeypatch.undo()
    assert store.get_job(1) is None

    store.save(jobs=[pending_job(1)], meta={"fairshare": "{}", "tenancy": "{}"})
    assert (store.get_job(1), store.get_meta("fairshare"), store.get_meta("tenancy")) == (pending_job(1), "{}", "{}")
