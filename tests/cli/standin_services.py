"""The stand-in controller's services routes (tests/cli/standin.py): apply, list, show, scale, restart and
delete over `state.services`, bodies checked with the real ServiceSpec, replies shaped as ServiceOut."""
from __future__ import annotations

from fastapi import FastAPI, HTTPException, Response

from corral.api.services import ServiceApplyReply, ServiceOut, ServiceScale, ServiceSpec
from corral.protocol import API_PREFIX

SERVICES = API_PREFIX + "/services"


def service_out(spec: ServiceSpec, revision: int = 1, replicas: list[dict] | None = None, **fields) -> dict:
    spec = spec.model_copy(update={"user": spec.user or "alice"})
    out = {"name": spec.name, "user": spec.user, "account": spec.account or "", "revision": revision,
           "desired_replicas": spec.replicas, "ready_replicas": sum(1 for r in replicas or [] if r["ready"]),
           "created": 1_700_000_000.0, "spec": spec, "replicas": replicas or [], **fields}
    return ServiceOut.model_validate(out).model_dump(mode="json")


def add_service_routes(app: FastAPI, state, authed) -> None:
    def known(name: str) -> dict:
        if name not in state.services:
            raise HTTPException(404, f"unknown service {name!r}")
        return state.services[name]

    @app.post(SERVICES, dependencies=[authed])
    def apply(body: ServiceSpec, response: Response) -> ServiceApplyReply:
        state.service_posts.append(body.model_dump(mode="json", exclude_unset=True))
        before = state.services.get(body.name)
        if before is None:
            state.services[body.name] = service_out(body)
            response.status_code = 201
            return ServiceApplyReply(name=body.name, outcome="created", revision=1)
        spec = body.model_copy(update={"user": before["user"]})
        if ServiceSpec.model_validate(before["spec"]) == spec:
            return ServiceApplyReply(name=body.name, outcome="unchanged", revision=before["revision"])
        state.services[body.name] = service_out(spec, before["revision"] + 1, before["replicas"])
        return ServiceApplyReply(name=body.name, outcome="updated", revision=before["revision"] + 1)

    @app.get(SERVICES, dependencies=[authed])
    def services() -> list[dict]:
        return [state.services[name] for name in sorted(state.services)]

    @app.get(SERVICES + "/{name}", dependencies=[authed])
    def service(name: str) -> dict:
        return known(name)

    @app.post(SERVICES + "/{name}/scale", dependencies=[authed])
    def scale(name: str, body: ServiceScale) -> dict:
        known(name)["desired_replicas"] = body.replicas
        return state.services[name]

    @app.post(SERVICES + "/{name}/restart", dependencies=[authed])
    def restart(name: str) -> dict:
        state.actions.append(("restart", name))
        return known(name)

    @app.delete(SERVICES + "/{name}", status_code=204, dependencies=[authed])
    def delete(name: str) -> Response:
        known(name)
        del state.services[name]
        return Response(status_code=204)
