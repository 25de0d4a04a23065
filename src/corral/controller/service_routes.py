"""HTTP routes for services (docs/services.md): apply (create or update), list, show, scale, restart,
delete, the ready endpoints the gateway routes to (long-polled), and the gateway's load reports.

Each change goes to the engine as one of the design's events (`ServiceApplied`, `ServiceScaled`,
`ServiceRestartRequested`, `ServiceDeleted`, `ServiceLoadReported`) through `ControllerService.request`,
so it is committed before it is answered, like every job action. Who may do what is as for jobs
(docs/security.md): a user manages their own services; a coordinator of the service's account and an
operator manage any of theirs; the gateway reports load with the cluster secret (or an admin's token).
Every change and every refusal is audited."""
from __future__ import annotations

import asyncio
from typing import Any, Literal, NoReturn

from fastapi import Depends, FastAPI, HTTPException, Query, Response

from corral.api.services import (
    EndpointsOut,
    ServiceApplyReply,
    ServiceLoad,
    ServiceOut,
    ServiceScale,
    ServiceSpec,
)
from corral.controller import identity_rules
from corral.controller.auth import Principal
from corral.controller.guard import Guard, coordinated_accounts
from corral.controller.params import NamePath
from corral.controller.service import ControllerService
from corral.controller.service_views import (
    EndpointVersions,
    endpoint_set,
    endpoints_out,
    service_out,
)
from corral.engine import events as engine_events
from corral.engine.admission import AdmissionError
from corral.engine.engine import WrongState
from corral.engine.records import Service
from corral.engine.service_events import UnknownService
from corral.protocol import API_PREFIX

SERVICES = f"{API_PREFIX}/services"
ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown service"}, 409: {"description": "another user's service of that name"},
    422: {"description": "invalid, naming the field"},
    503: {"description": "the database cannot be written: nothing was changed"}}
# How often a long-polling endpoints request looks again, and for how long at most.
ENDPOINTS_POLL_S = 0.1
ENDPOINTS_WAIT_MAX_S = 30.0


def service_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:  # noqa: C901 (a table of handlers)
    user_dep = Depends(guard.user)
    versions = EndpointVersions(int(service.clock() * 1000))
    # service.engine, not a copy of it here: the service replaces its engine after a failed commit.

    def current() -> dict[str, Service]:
        """The services, less those being deleted (their replicas stopping): those are gone to users."""
        return {name: record for name, record in service.engine.services.items() if not record.deleted}

    def record_of(name: str) -> Service:
        record = current().get(name)
        if record is None:
            raise HTTPException(404, f"unknown service {name!r}")
        return record

    def addresses() -> dict[str, str]:
        return {name: node.address for name, node in service.engine.nodes.items()}

    def show(record: Service, principal: Principal) -> ServiceOut:
        """Its environment and script only to whoever may manage it (they may hold a model server's keys):
        others see its variables' names, as a job's environment is its owner's alone."""
        reveal = manages(principal, record, service.engine.tenancy.spec)
        return service_out(record, service.engine.jobs.values(), addresses(), reveal=reveal)

    async def change(principal: Principal, action: str, name: str, event: Any) -> Any:
        """Hand the engine one service event; a refusal is audited and answered 422 with its reason."""
        try:
            reply = await service.request(event)
        except (AdmissionError, ValueError) as exc:
            await guard.authn.audit(principal, action, f"service {name}", "denied", str(exc))
            raise HTTPException(422, str(exc)) from None
        except WrongState as exc:  # e.g. another user's service of that name, created meanwhile
            await guard.authn.audit(principal, action, f"service {name}", "denied", str(exc))
            raise HTTPException(409, str(exc)) from None
        except UnknownService:  # deleted meanwhile
            raise HTTPException(404, f"unknown service {name!r}") from None
        return reply

    @app.post(SERVICES, responses=ERRORS)
    async def apply(body: ServiceSpec, response: Response, principal: Principal = user_dep) -> ServiceApplyReply:
        """Create the service, or update it to this spec (a new revision rolled out replica by replica, unless
        no replica changes: a new replica count scales). `outcome` says which, or `unchanged` when the spec
        is the one it runs; `revision` is the one it runs now. `user` is the caller (an
        admin may name another), `uid` the caller's."""
        spec, uid = await _owned_spec(guard, principal, body)
        before = current().get(spec.name)
        if before is not None:
            await _may_manage(guard, principal, before, "apply service", service.engine.tenancy.spec)
            if before.spec.user != spec.user:
                await guard.deny(principal, "apply service", f"service {spec.name}",
                                 f"service {spec.name} belongs to {before.spec.user}; {spec.user} cannot take it over")
            if before.spec == spec:
                return ServiceApplyReply(name=spec.name, outcome="unchanged", revision=before.revision)
        record = await change(principal, "apply service", spec.name,
                              engine_events.ServiceApplied(spec=spec, user=spec.user, uid=uid))
        # A changed spec is an update; the engine decides whether it is a new revision (a rolling update) or,
        # when no replica would change (a scale, a new min_ready), the same one.
        outcome: Literal["created", "updated"] = "created" if before is None else "updated"
        if before is None:
            response.status_code = 201
        await guard.allow(principal, "apply service", f"service {spec.name}",
                          f"{outcome}, revision {record.revision}, user {spec.user}, account {spec.account or '-'}")
        return ServiceApplyReply(name=spec.name, outcome=outcome, revision=record.revision)

    @app.get(SERVICES, responses=ERRORS)
    async def list_services(principal: Principal = user_dep) -> list[ServiceOut]:
        return [show(record, principal) for _name, record in sorted(current().items())]

    @app.get(f"{SERVICES}/{{name}}", responses=ERRORS)
    async def get_service(name: NamePath, principal: Principal = user_dep) -> ServiceOut:
        """The spec, revision, desired and ready replicas, and each replica's job, node, state, restarts,
        probe status and endpoints."""
        return show(record_of(name), principal)

    @app.delete(f"{SERVICES}/{{name}}", status_code=204, responses=ERRORS)
    async def delete_service(name: NamePath, principal: Principal = user_dep) -> Response:
        """Stop every replica (SIGTERM, then SIGKILL after the grace period) and forget the service."""
        record = record_of(name)
        await _may_manage(guard, principal, record, "delete service", service.engine.tenancy.spec)
        await change(principal, "delete service", name, engine_events.ServiceDeleted(name=name))
        await guard.allow(principal, "delete service", f"service {name}")
        versions.forget([name])
        return Response(status_code=204)

    @app.post(f"{SERVICES}/{{name}}/scale", responses=ERRORS)
    async def scale(name: NamePath, body: ServiceScale, principal: Principal = user_dep) -> ServiceOut:
        record = record_of(name)
        await _may_manage(guard, principal, record, "scale service", service.engine.tenancy.spec)
        autoscale = record.spec.autoscale
        if autoscale is not None and not autoscale.min_replicas <= body.replicas <= autoscale.max_replicas:
            reason = (f"replicas: {body.replicas} is outside autoscale's range ({autoscale.min_replicas} to "
                      f"{autoscale.max_replicas}); apply a spec with another range to go beyond it")
            await guard.authn.audit(principal, "scale service", f"service {name}", "denied", reason)
            raise HTTPException(422, reason)
        await change(principal, "scale service", name, engine_events.ServiceScaled(name=name, replicas=body.replicas))
        await guard.allow(principal, "scale service", f"service {name}", f"replicas {body.replicas}")
        return show(record_of(name), principal)

    @app.post(f"{SERVICES}/{{name}}/restart", responses=ERRORS)
    async def restart(name: NamePath, principal: Principal = user_dep) -> ServiceOut:
        """Replace every replica, as a rolling update does (the spec and revision stay)."""
        record = record_of(name)
        await _may_manage(guard, principal, record, "restart service", service.engine.tenancy.spec)
        await change(principal, "restart service", name, engine_events.ServiceRestartRequested(name=name))
        await guard.allow(principal, "restart service", f"service {name}")
        return show(record_of(name), principal)

    def upstream_authorization(principal: Principal, found: list) -> str:
        """A session's upstream token, for the gateway (the cluster secret) or an admin; "" for anyone else."""
        if not found or not (principal.kind == "service" or principal.admin):
            return ""
        job = service.engine.jobs.get(found[0].job_id)
        if job is None or not job.spec.session or service.job_credential is None:
            return ""
        # Bearer: what Ray's token authentication reads, and JupyterLab takes it as well as "token".
        return f"Bearer {service.session_secret(job)}"

    @app.get(f"{SERVICES}/{{name}}/endpoints", responses=ERRORS)
    async def endpoints(name: NamePath, principal: Principal = user_dep,
                        after: int | None = Query(None, ge=0, le=2**62, description=(
                            "A version this caller has: answer once the set's version is another one")),
                        wait_s: float = Query(25.0, ge=0, le=ENDPOINTS_WAIT_MAX_S, allow_inf_nan=False,
                                              description="How long to wait for a change at most")) -> EndpointsOut:
        """The ready replicas' `host:port` per port name, and the set's version. With `after`, the answer
        waits (up to `wait_s`) until the version differs from `after`: the gateway's long poll."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            record = record_of(name)
            found = endpoint_set(record, service.engine.jobs.values(), addresses())
            version = versions.current(name, found)
            if after is None or version != after or loop.time() >= deadline:
                return endpoints_out(record, version, found, upstream_authorization(principal, found))
            await asyncio.sleep(ENDPOINTS_POLL_S)

    @app.post(f"{SERVICES}/{{name}}/load", status_code=204, responses=ERRORS)
    async def load(name: NamePath, body: ServiceLoad, principal: Principal = user_dep) -> Response:
        """What the gateway measured of the service (for the autoscaler). Only the gateway, which runs
        with the cluster secret, or an admin may post it (docs/security.md)."""
        if not (principal.kind == "service" or principal.admin):
            await guard.deny(principal, "report service load", f"service {name}",
                             "only the gateway (the cluster secret) or an admin may report a service's load")
        record_of(name)
        at = body.at if body.at is not None else service.clock()
        # Routine traffic every few seconds, like an agent's reports: not audited.
        await service.request(engine_events.ServiceLoadReported(name=name, inflight=body.inflight, rps=body.rps, at=at))
        return Response(status_code=204)


async def _owned_spec(guard: Guard, principal: Principal, body: ServiceSpec) -> tuple[ServiceSpec, int]:
    """The spec as the caller may apply it, and the uid its replicas run as: the caller's own (admins may
    name another user, whose uid is then this host's; a service as root only from root on this host, as
    a job)."""
    user = body.user or principal.name
    refusal = identity_rules.root_refusal("a service", user, None, principal.is_root_on_controller_host)
    if refusal:
        await guard.deny(principal, "apply service", f"service {body.name}", refusal)
    uid: int | None
    if user == principal.name:
        uid = principal.uid if principal.uid is not None else identity_rules.host_uid(user)
    elif not principal.admin:
        await guard.deny(principal, "apply service", f"service {body.name}",
                         f"{principal.name} cannot apply a service as {user} (only an admin can)")
    else:
        uid = identity_rules.host_uid(user)
    if uid is None:
        await _refuse(guard, principal, body.name, f"user: {user!r} is not a user on the controller's host")
    return body.model_copy(update={"user": user}), uid


async def _refuse(guard: Guard, principal: Principal, name: str, reason: str) -> NoReturn:
    await guard.authn.audit(principal, "apply service", f"service {name}", "denied", reason)
    raise HTTPException(422, reason)


def manages(principal: Principal, record: Service, tenancy) -> bool:
    """As for jobs: its owner, a coordinator of its account, or an operator."""
    spec = record.spec
    if principal.operator or principal.name == spec.user and principal.uid == record.uid:
        return True
    return principal.kind == "user" and bool(spec.account) and spec.account in coordinated_accounts(
        tenancy, principal.name)


async def _may_manage(guard: Guard, principal: Principal, record: Service, action: str, tenancy) -> None:
    if manages(principal, record, tenancy):
        return
    spec = record.spec
    await guard.deny(principal, action, f"service {spec.name}",
                     f"service {spec.name} belongs to {spec.user} (account {spec.account or '-'}); "
                     f"{principal.name} is neither its owner, a coordinator of its account, nor an operator")
