"""A record saved and loaded back is equal to the original, field for field."""
from __future__ import annotations

from dataclasses import MISSING, fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral.core.model import Gpu, NodeSlice, Request
from corral.engine.records import Job, JobSpec, JobState, Node, NodeRun
from corral.store import Store
from tests.store.factories import full_job, full_node, full_spec, pending_job


def _non_default_fields(obj: object) -> list[str]:
    """Fields of a dataclass instance that still hold their declared default."""
    defaults = []
    for f in fields(obj):  # type: ignore[arg-type]
        if not f.init:
            continue  # derived in __post_init__
        default = f.default_factory() if f.default_factory is not MISSING else f.default
        if default is not MISSING and getattr(obj, f.name) == default:
            defaults.append(f.name)
    return defaults


@pytest.mark.parametrize(
    "record",
    [full_job(), full_spec(), full_spec().request, full_node(), full_node().gpus[0], full_job().runs["gpu001"]],
    ids=type,
)
def test_factories_set_every_field(record: object) -> None:
    # If this fails, a record grew a field: add it to the factory, and check that codec.py and
    # schema.py (with a migration) store it.
    assert _non_default_fields(record) == []


def test_full_job_round_trips(store: Store) -> None:
    job = full_job(7)
    store.save(jobs=[job])
    loaded = store.get_job(7)
    assert loaded == job
    assert isinstance(loaded.state, JobState) and isinstance(loaded.final_state, JobState)
    assert isinstance(loaded.spec.argv, tuple) and isinstance(loaded.slices[0].gpus, tuple)


def test_pending_job_with_defaults_round_trips(store: Store) -> None:
    job = pending_job(3)
    store.save(jobs=[job])
    assert store.get_job(3) == job


def test_node_round_trips(store: Store) -> None:
    nodes = [full_node("gpu002"), Node(name="cpu1", gpus=(), cpus=4, mem_mib=8192)]
    store.save(nodes=nodes)
    assert store.load_nodes() == sorted(nodes, key=lambda node: node.name)


def test_get_missing_job_is_none(store: Store) -> None:
    assert store.get_job(404) is None


# Text both databases accept: PostgreSQL text cannot hold NUL, nor UTF-8 lone surrogates.
_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
_times = st.floats(min_value=0, max_value=4e9, allow_nan=False) | st.none()
_small = st.integers(min_value=-(2**31), max_value=2**31 - 1)

_requests = st.builds(
    Request,
    num_nodes=st.integers(1, 64),
    tasks_per_node=st.integers(1, 8),
    gpus_per_node=st.integers(0, 8),
    cpus_per_task=st.integers(1, 64),
    mem_per_node_mib=st.integers(0, 2**31 - 1),
    time_limit_s=st.integers(1, 10**7),
    partition=_text,
)
_specs = st.builds(
    JobSpec,
    name=_text,
    user=_text,
    request=_requests,
    script=_text | st.none(),
    argv=st.lists(_text, max_size=4).map(tuple),
    workdir=_text,
    env=st.dictionaries(_text, _text, max_size=4),
    output=_text,
    error=_text | st.none(),
    gpus_per_task=st.integers(1, 8) | st.none(),
    priority=_small,
    uid=st.integers(0, 2**31 - 1),
    submit_host=_text,
)
_gpu_indexes = st.lists(st.integers(0, 15), max_size=8).map(tuple)
_slices = st.builds(NodeSlice, node=_text, gpus=_gpu_indexes, cpus=_small, mem_mib=_small)
_runs = st.builds(NodeRun, started=st.booleans(), finished=st.booleans(), exit_code=_small, signal=_small)
_jobs = st.builds(
    Job,
    id=st.integers(1, 2**31 - 1),
    spec=_specs,
    submit_time=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    state=st.sampled_from(JobState),
    reason=_text,
    estimated_start=_times,
    start_time=_times,
    end_time=_times,
    slices=st.lists(_slices, max_size=3).map(tuple),
    runs=st.dictionaries(_text, _runs, max_size=3),
    exit_code=_small,
    exit_signal=_small,
    final_state=st.sampled_from(JobState) | st.none(),
    kill_deadline=_times,
    restart_count=st.integers(0, 1000),
)
_gpus = st.builds(Gpu, index=st.integers(0, 15), model=_text, memory_mib=_small, domain=_text | st.none())
_nodes = st.builds(
    Node,
    name=_text,
    gpus=st.lists(_gpus, max_size=4).map(tuple),
    cpus=_small,
    mem_mib=_small,
    address=_text,
    up=st.booleans(),
    drain=st.booleans(),
    drain_reason=_text,
    last_seen=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    partitions=st.frozensets(_text, max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=_jobs, node=_nodes)
def test_any_record_round_trips(module_store: Store, job: Job, node: Node) -> None:
    module_store.save(jobs=[job], nodes=[node])
    assert module_store.get_job(job.id) == job
    assert node in module_store.load_nodes()
