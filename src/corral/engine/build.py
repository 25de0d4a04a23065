"""The one place an engine is made: the controller (restored from its store), the simulator and the tests
all build it here, naming the profile of the world it runs in (config.LIVE or config.SIMULATED)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corral.api.tenancy import TenancySpec
from corral.engine.config import EngineConfig, EngineProfile
from corral.engine.engine import Engine
from corral.engine.records import Job, Node, Service
from corral.engine.submission import JobArchive


def build_engine(config: EngineConfig, profile: EngineProfile, *, jobs: Iterable[Job] = (),
                 nodes: Iterable[Node] = (), next_job_id: int = 1, tenancy: TenancySpec | None = None,
                 fairshare_state: dict[str, Any] | None = None,
                 reservations: list[dict[str, Any]] | None = None, ended: Iterable[Job] = (),
                 unsaved_meta: Iterable[str] = (), archive: JobArchive | None = None,
                 services: Iterable[Service] = ()) -> Engine:
    """An engine holding `jobs` (only the active ones are kept) and `nodes`, numbering new jobs from
    `next_job_id`, with the tenancy, fair-share usage and reservations a store kept (None: none yet), the
    ended jobs that active jobs' dependencies name, the metadata keys the store lacks yet, and where the
    jobs the engine no longer holds are read (the store; the simulator's own record), and the services."""
    return Engine(config, profile, jobs, nodes, next_job_id=next_job_id, tenancy=tenancy,
                  fairshare_state=fairshare_state, reservations=reservations, ended=ended,
                  unsaved_meta=unsaved_meta, archive=archive, services=services)
