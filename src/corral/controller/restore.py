"""The engine rebuilt from the store: at the controller's start, and after a failed commit (service.py)."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from corral.api.tenancy import TenancySpec
from corral.engine.build import build_engine
from corral.engine.config import EngineConfig, EngineProfile
from corral.engine.dependencies import parse_dependency
from corral.engine.engine import Engine

if TYPE_CHECKING:
    from corral.store import Store


def restore_engine(config: EngineConfig, profile: EngineProfile, store: Store, now: float,
                   file_tenancy: TenancySpec | None = None) -> Engine:
    """The engine as the database left it (`profile`: config.LIVE, but for a test that drives the live
    controller in simulated time). The tenancy stored there (edited through the API) wins over the
    config file's, which only seeds a new database."""
    nodes = store.load_nodes()
    for node in nodes:
        # Agents get one node timeout to re-register after a controller restart before their
        # jobs are declared lost.
        if node.up:
            node.last_seen = now
    stored = store.get_meta("tenancy")
    tenancy = TenancySpec(**json.loads(stored)) if stored else file_tenancy
    fairshare = json.loads(store.get_meta("fairshare") or "null")
    reservations = json.loads(store.get_meta("reservations") or "[]")
    jobs = store.load_active_jobs()
    active = {job.id for job in jobs}
    targets = {t for job in jobs if job.spec.dependency
               for clause in parse_dependency(job.spec.dependency).clauses for t, _ in clause.targets}
    ended = [found for target in sorted(targets - active) if (found := store.get_job(target)) is not None]
    # A tenancy from the config file seeds a new database: the first commit stores it.
    unsaved = ("tenancy",) if tenancy is not None and not stored else ()
    return build_engine(config, profile, jobs=jobs, nodes=nodes, next_job_id=store.max_job_id() + 1,
                        tenancy=tenancy, fairshare_state=fairshare, reservations=reservations, ended=ended,
                        unsaved_meta=unsaved, archive=store, services=store.load_services())
