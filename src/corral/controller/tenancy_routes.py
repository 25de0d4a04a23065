"""HTTP routes for tenancy: priorities, fair share, queues, the tenancy document and reservations; and the
scheduler's settings."""
from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Response

from corral.api.schemas import SchedulerOut
from corral.api.tenancy import (
    FairShareOut,
    PriorityOut,
    QueueOut,
    ReservationOut,
    ReservationSpec,
    TenancySpec,
)
from corral.controller import tenancy_views
from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.controller.params import NamePath
from corral.controller.service import ControllerService
from corral.engine.reservations import ReservationError
from corral.protocol import API_PREFIX

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown"}, 409: {"description": "conflict"}, 422: {"description": "invalid"},
    503: {"description": "the database cannot be written: nothing was changed"}}


def tenancy_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:
    auth = Depends(guard.user)
    user_dep = Depends(guard.user)
    # service.engine, not a copy of it here: the service replaces its engine after a failed commit.

    @app.get(f"{API_PREFIX}/priority", dependencies=[auth])
    async def priority() -> list[PriorityOut]:
        return tenancy_views.priorities(service.engine)

    @app.get(f"{API_PREFIX}/fairshare", dependencies=[auth])
    async def fairshare() -> list[FairShareOut]:
        await service.accrue_usage()  # bring usage up to now: cycles only run on events
        return tenancy_views.fairshare(service.engine)

    @app.get(f"{API_PREFIX}/queues", dependencies=[auth])
    async def queues() -> list[QueueOut]:
        return tenancy_views.queues(service.engine)

    @app.get(f"{API_PREFIX}/tenancy", dependencies=[auth])
    async def get_tenancy() -> TenancySpec:
        return service.engine.tenancy.spec

    @app.put(f"{API_PREFIX}/tenancy", responses=ERRORS)
    async def put_tenancy(body: TenancySpec, principal: Principal = user_dep) -> TenancySpec:
        await guard.require(principal, "admin", "set tenancy")
        await service.set_tenancy(body)
        return service.engine.tenancy.spec

    @app.get(f"{API_PREFIX}/scheduler", dependencies=[auth])
    async def scheduler() -> SchedulerOut:
        sched = service.engine.config.scheduler
        mix = [{"gpus": shape.gpus, "gpu_milli": shape.gpu_milli, "cpus": shape.cpus, "gpu_model": shape.gpu_model,
                "weight": weight} for shape, weight in sched.task_mix]
        return SchedulerOut(placement=sched.placement, backfill=sched.backfill,
                            max_reservations=sched.max_reservations, max_jobs_considered=sched.max_jobs_considered,
                            fgd_cpu_weight=sched.fgd_cpu_weight, task_mix=mix)

    @app.get(f"{API_PREFIX}/reservations", dependencies=[auth])
    async def reservations() -> list[ReservationOut]:
        now = service.clock()
        return [tenancy_views.reservation_out(r, now) for r in service.engine.reservations.by_name.values()]

    @app.post(f"{API_PREFIX}/reservations", status_code=201, responses=ERRORS)
    async def create_reservation(body: ReservationSpec, principal: Principal = user_dep) -> ReservationOut:
        await guard.require(principal, "operator", "create reservation", f"reservation {body.name}")
        try:
            record = await service.add_reservation(body)
        except ReservationError as exc:
            status = 409 if "exists" in str(exc) or "overlaps" in str(exc) else 422
            raise HTTPException(status, str(exc)) from None
        return tenancy_views.reservation_out(record, service.clock())

    @app.delete(f"{API_PREFIX}/reservations/{{name}}", status_code=204, responses=ERRORS)
    async def delete_reservation(name: NamePath, principal: Principal = user_dep) -> Response:
        await guard.require(principal, "operator", "delete reservation", f"reservation {name}")
        try:
            await service.remove_reservation(name)
        except KeyError:
            raise HTTPException(404, f"unknown reservation {name!r}") from None
        return Response(status_code=204)
