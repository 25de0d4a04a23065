"""The services REST resource over the real app (SQLite store, routes, guard, audit log): bad specs are
refused with 422 naming the field before anything changes, every route needs a user's credential, only
the gateway (the cluster secret) or an admin may report load, a user cannot apply a service as another,
and every refusal is audited.
The whole apply/show/scale/restart/delete round trip runs through the real engine."""
from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from corral.controller import credentials as cred
from tests.api.controller import NODE, SECRET, InProcessController

SPEC = {"name": "web", "command": ["python3", "-m", "http.server"], "workdir": "/tmp",
        "ports": [{"name": "http"}], "replicas": 2}


@pytest.fixture
def api(tmp_path) -> InProcessController:
    controller = InProcessController(f"sqlite:///{tmp_path / 'corral.db'}")
    assert controller.post("/agents/register", json=NODE).status_code == 200
    return controller


def user(name: str, uid: int) -> dict[str, str]:
    credential = cred.issue_user(cred.signing_key(SECRET), name, uid, uid, time.time(), 600)
    return {"Authorization": f"Bearer {credential}"}


ALICE = ("alice-svcedge", 42001)
BOB = ("bob-svcedge", 42002)


def outside_api(api: InProcessController, path: str) -> httpx.Response:
    """A GET of a path outside /api/v1 (InProcessController prefixes it), with the cluster secret."""
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=api.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://controller") as client:
            return await client.get(path, headers={"Authorization": f"Bearer {SECRET}"})

    return asyncio.run(send())


def audit(api: InProcessController, action: str) -> list[dict]:
    reply = api.get("/audit", params={"limit": 100_000})
    assert reply.status_code == 200, reply.text
    return [entry for entry in reply.json() if entry["action"] == action]


@pytest.mark.parametrize(("body", "expected"), [
    ({**SPEC, "ports": [{"name": "http"}, {"name": "admin", "port": 70000}]},
     "ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)"),
    ({**SPEC, "colour": "blue"}, "colour: unknown field (the known ones: account, autoscale,"),
    ({**SPEC, "ports": [{"name": "http", "protocol": "udp"}]},
     "ports[0].protocol: unknown field (the known ones: name, port)"),
    ({**SPEC, "probes": {"readiness": {"http": {"path": "/", "port": "grpc"}}}},
     "probes.readiness.http.port: 'grpc' is not one of the service's ports (the service's ports are http)"),
    ({**SPEC, "autoscale": {"max_replicas": 1, "target_rps": 5}}, "replicas: 2 is outside autoscale's range (1 to 1)"),
    ({**SPEC, "autoscale": {"max_replicas": 4}}, "autoscale: give exactly one of target_inflight or target_rps"),
    ({**SPEC, "workdir": "relative"}, "workdir: the working directory must be an absolute path"),
])
def test_bad_specs_are_refused_naming_the_field_and_nothing_is_applied(api, body, expected):
    reply = api.post("/services", json=body, headers=user(*ALICE))
    assert reply.status_code == 422, reply.text
    assert expected in reply.json()["detail"]
    listed = api.get("/services", headers=user(*ALICE))
    assert listed.status_code == 200 and listed.json() == []


def test_job_bodies_keep_their_own_error_paths(api):
    """The services' `ports[1].port` form is theirs: a job's body still says `gpus.0.index`-style paths."""
    reply = api.post("/jobs", json={"workdir": "/tmp", "user": "alice", "argv": ["true"], "colour": "x"})
    assert reply.status_code == 422 and reply.json()["detail"] == "colour: Extra inputs are not permitted"


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/services", SPEC), ("GET", "/services", None), ("GET", "/services/web", None),
    ("DELETE", "/services/web", None), ("POST", "/services/web/scale", {"replicas": 3}),
    ("POST", "/services/web/restart", None), ("GET", "/services/web/endpoints", None),
    ("POST", "/services/web/load", {"inflight": 1, "rps": 2.0}),
])
def test_every_route_needs_a_users_credential(api, method, path, body):
    anonymous = api.request(method, path, json=body, headers={"Authorization": ""})
    assert anonymous.status_code == 401, anonymous.text
    agent = {"Authorization": f"Bearer {cred.issue_agent(cred.signing_key(SECRET), 'node1')}"}
    as_agent = api.request(method, path, json=body, headers=agent)
    assert as_agent.status_code == 403, as_agent.text
    assert "an agent credential cannot be used on user routes" in as_agent.json()["detail"]


def test_only_the_gateway_or_an_admin_reports_load_and_a_refusal_is_audited(api):
    reply = api.post("/services/web/load", json={"inflight": 3, "rps": 10.0}, headers=user(*ALICE))
    assert reply.status_code == 403
    assert "only the gateway (the cluster secret) or an admin may report a service's load" in reply.json()["detail"]
    [entry] = audit(api, "report service load")
    assert (entry["who"], entry["outcome"], entry["target"]) == (ALICE[0], "denied", "service web")


def test_a_user_cannot_apply_a_service_as_another(api):
    reply = api.post("/services", json={**SPEC, "user": BOB[0]}, headers=user(*ALICE))
    assert reply.status_code == 403
    assert f"{ALICE[0]} cannot apply a service as {BOB[0]} (only an admin can)" in reply.json()["detail"]
    [entry] = audit(api, "apply service")
    assert (entry["who"], entry["outcome"]) == (ALICE[0], "denied")


def test_a_service_as_root_is_refused_to_anyone_but_root_on_the_controllers_host(api):
    reply = api.post("/services", json={**SPEC, "user": "root"}, headers=user(*ALICE))
    assert reply.status_code == 403 and "a service as root" in reply.json()["detail"]


def test_apply_show_scale_restart_delete(api):
    owner = user(*ALICE)
    created = api.post("/services", json=SPEC, headers=owner)
    assert created.status_code == 201, created.text
    assert created.json()["outcome"] == "created"
    revision = created.json()["revision"]
    again = api.post("/services", json=SPEC, headers=owner)
    assert again.status_code == 200 and again.json() == {"name": "web", "outcome": "unchanged", "revision": revision}
    changed = api.post("/services", json={**SPEC, "env": {"VERSION": "2"}}, headers=owner)
    assert changed.json()["outcome"] == "updated" and changed.json()["revision"] == revision + 1
    # A new replica count scales: an update, but no new revision (no replica is replaced).
    scaled_by_apply = api.post("/services", json={**SPEC, "env": {"VERSION": "2"}, "replicas": 3}, headers=owner)
    assert scaled_by_apply.json()["outcome"] == "updated" and scaled_by_apply.json()["revision"] == revision + 1
    assert api.post("/services", json={**SPEC, "env": {"VERSION": "2"}}, headers=owner).json()["outcome"] == "updated"

    shown = api.get("/services/web", headers=user(*BOB)).json()  # anyone may read, as the queue ...
    assert (shown["user"], shown["desired_replicas"], shown["spec"]["env"]) == (ALICE[0], 2, {"VERSION": "(hidden)"})
    assert api.get("/services", headers=owner).json()[0]["spec"]["env"] == {"VERSION": "2"}  # ... its owner all
    # Replicas are jobs (during the update to revision 2, an index may have its old and its new one).
    assert {replica["index"] for replica in shown["replicas"]} == {0, 1}
    jobs = {job["id"]: job for job in api.get("/jobs", headers=owner).json()}
    assert all(jobs[replica["job_id"]]["name"] == "web" for replica in shown["replicas"])

    assert api.post("/services/web/scale", json={"replicas": 3}, headers=user(*BOB)).status_code == 403
    scaled = api.post("/services/web/scale", json={"replicas": 3}, headers=owner)
    assert scaled.status_code == 200 and scaled.json()["desired_replicas"] == 3
    assert api.post("/services/web/restart", headers=owner).status_code == 200
    assert api.post("/services/web/load", json={"inflight": 1, "rps": 1.0}).status_code == 204  # the secret
    assert api.get("/services/web", headers=owner).json()["load"]["rps"] == 1.0
    metrics = outside_api(api, "/metrics").text
    assert 'corral_service_replicas_desired{service="web"} 3.0' in metrics
    assert 'corral_service_revision{service="web"}' in metrics

    endpoints = api.get("/services/web/endpoints", headers=owner).json()
    assert endpoints["service"] == "web" and endpoints["endpoints"] == []  # no agent runs them here
    waited = api.get("/services/web/endpoints", params={"after": endpoints["version"], "wait_s": 0.3},
                     headers=owner).json()
    assert waited["version"] == endpoints["version"]

    never_fits = api.post("/services", json={**SPEC, "name": "huge", "gpus_per_node": 64}, headers=owner)
    assert never_fits.status_code == 422 and "GPU" in never_fits.json()["detail"], never_fits.text
    assert api.get("/services/huge", headers=owner).status_code == 404  # nothing half-applied
    taken = api.post("/services", json=SPEC, headers=user(*BOB))
    assert taken.status_code == 403 and f"belongs to {ALICE[0]}" in taken.json()["detail"]

    assert api.request("DELETE", "/services/web", headers=user(*BOB)).status_code == 403
    assert api.request("DELETE", "/services/web", headers=owner).status_code == 204
    assert api.get("/services/web", headers=owner).status_code == 404
    actions = {(e["action"], e["outcome"]) for e in api.get("/audit", params={"limit": 100_000}).json()}
    assert {("apply service", "allowed"), ("scale service", "allowed"), ("scale service", "denied"),
            ("restart service", "allowed"), ("delete service", "allowed"), ("delete service", "denied")} <= actions
