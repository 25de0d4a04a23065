"""Save throughput of the store. Not a test: run it from the repository root.

    .venv/bin/python -m tests.store.bench_save [URL]     (default: a temp SQLite file)
"""
from __future__ import annotations

import platform
import sqlite3
import sys
import tempfile
import time
from dataclasses import replace

from corral.engine.records import JobState
from corral.store import Store

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from tests.store.factories import full_job  # noqa: E402


def single_saves_per_s(store: Store, count: int, first_id: int) -> float:
    jobs = [full_job(first_id + i) for i in range(count)]
    started = time.perf_counter()
    for job in jobs:
        store.save(jobs=[job])
    return count / (time.perf_counter() - started)


def batch_jobs_per_s(store: Store, batches: int, batch_size: int, first_id: int) -> float:
    jobs = [full_job(first_id + i) for i in range(batches * batch_size)]
    started = time.perf_counter()
    for b in range(batches):
        store.save(jobs=jobs[b * batch_size : (b + 1) * batch_size])
    return batches * batch_size / (time.perf_counter() - started)


def update_jobs_per_s(store: Store, batches: int, batch_size: int, first_id: int) -> float:
    """Updates of existing rows (the common case: state changes of known jobs)."""
    count = batches * batch_size
    jobs = [replace(full_job(first_id + i), state=JobState.RUNNING) for i in range(count)]
    started = time.perf_counter()
    for b in range(batches):
        store.save(jobs=jobs[b * batch_size : (b + 1) * batch_size])
    return count / (time.perf_counter() - started)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tmp}/bench.db"
        with Store.open(url) as store:
            first = store.max_job_id() + 1
            singles = single_saves_per_s(store, 3000, first)
            batches = batch_jobs_per_s(store, 20, 1000, first + 10_000)
            updates = update_jobs_per_s(store, 20, 1000, first + 10_000)
            print(f"{store.url} (Python {platform.python_version()}, SQLite {sqlite3.sqlite_version})")
            print(f"  single-job saves:        {singles:10.0f} saves/s")
            print(f"  batches of 1000 inserts: {batches:10.0f} jobs/s")
            print(f"  batches of 1000 updates: {updates:10.0f} jobs/s")


if __name__ == "__main__":
    main()
