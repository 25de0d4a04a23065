"""`POST /api/v1/notebooks/spec` over the real app: it builds the spec `corral notebook` builds (the same
code), names the caller's session after them, refuses bad options naming the field, creates nothing, and
what it answers is applied through the ordinary services route as that user."""
from __future__ import annotations

import time

import pytest

from corral.api.services import ServiceSpec
from corral.controller import credentials as cred
from tests.api.controller import NODE, SECRET, InProcessController


@pytest.fixture
def api(tmp_path) -> InProcessController:
    controller = InProcessController(f"sqlite:///{tmp_path / 'corral.db'}")
    assert controller.post("/agents/register", json=NODE).status_code == 200
    return controller


def user(name: str, uid: int) -> dict[str, str]:
    credential = cred.issue_user(cred.signing_key(SECRET), name, uid, uid, time.time(), 600)
    return {"Authorization": f"Bearer {credential}"}


ALICE = user("alice_nbspec", 42101)


def test_the_plan_is_a_session_spec_applied_as_any_service(api):
    reply = api.post("/notebooks/spec", headers=ALICE, json={
        "gpus": 1, "time": "1:30:00", "idle_timeout": "30:00", "qos": "normal", "workdir": "/tmp",
        "jupyter": "/opt/venv/bin/jupyter"})
    assert reply.status_code == 200, reply.text
    planned = reply.json()
    assert planned["name"].startswith("nb-alice-nbspec-") and planned["lab_path"] == f"/s/{planned['name']}/lab"
    spec = ServiceSpec.model_validate(planned["spec"])
    assert (spec.session, spec.gpus_per_node, spec.time_limit_s, spec.idle_timeout_s, spec.qos) == (
        True, 1, 5400, 1800, "normal")
    assert "/opt/venv/bin/jupyter" in spec.command[-1]
    assert planned["token"] == {"expires_s": 5400 + 3600, "description": f"notebook {planned['name']}"}
    assert api.get("/services", headers=ALICE).json() == []  # planning creates nothing

    applied = api.post("/services", headers=ALICE, json=planned["spec"])
    assert applied.status_code == 201, applied.text
    shown = api.get(f"/services/{planned['name']}", headers=ALICE).json()
    assert shown["spec"]["user"] == "alice_nbspec" and shown["spec"]["session"] is True


@pytest.mark.parametrize(("body", "expected"), [
    ({"time": "4h"}, "time: invalid time limit '4h': expected M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"),
    ({"idle_timeout": "0"}, "idle_timeout: invalid time limit '0': unlimited time limits are not supported"),
    ({"gpus": 1, "gres": "shard:2"}, "gres: give gpus or gres, not both"),
    ({"gres": "tpu:1"}, "gres: invalid --gres 'tpu:1': give gpu:N, shard:N or mps:P"),
    ({"name": "My Notebook"}, "name: String should match pattern"),
    ({"workdir": "notebooks"}, "workdir: the working directory must be an absolute path"),
    ({"jupyter": ""}, "jupyter: String should have at least 1 character"),
])
def test_bad_options_are_refused_naming_the_field(api, body, expected):
    reply = api.post("/notebooks/spec", headers=ALICE, json={"workdir": "/tmp", **body})
    assert reply.status_code == 422 and expected in reply.json()["detail"], reply.text


def test_a_credential_is_needed(api):
    assert api.post("/notebooks/spec", json={"workdir": "/tmp"}, headers={"Authorization": "Bearer nope"}
                    ).status_code == 401
