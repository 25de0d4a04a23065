"""Credentials at the gateway, checked by the real controller (its app and SQLite store, in a thread): none
or a bad one gets 401, a valid one passes (the application sees the user, never the credential), a revoked
token stops working within the cache's time, a public service asks for nothing, and while the controller is
away only recently verified credentials pass."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from corral.controller import credentials as cred
from corral.gateway.sources import StaticSource
from tests.controller.live import SECRET, live_controller
from tests.gateway.fake_controller import SECRET as FAKE_SECRET
from tests.gateway.fake_controller import FakeController
from tests.gateway.harness import Backend, authenticating_gateway, route

TTL_S = 0.5


@pytest.fixture
def setup(tmp_path):
    with live_controller(tmp_path) as controller, Backend("a") as a:
        source = StaticSource(route("private", a, public=False), route("open", a, public=True))
        gateway = authenticating_gateway(source, controller.url, SECRET, ttl_s=TTL_S, stale_s=30)
        with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as http:
            yield controller, gateway, http


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


def new_token(controller) -> tuple[int, str]:
    reply = controller.http.post("/tokens", json={"user": "root", "description": "gateway test"})
    assert reply.status_code == 201, reply.text
    return reply.json()["id"], reply.json()["token"]


def test_no_or_a_bad_credential_gets_401(setup):
    _, _, http = setup
    missing = http.get("/s/private/who")
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="corral"'
    assert "needs a credential" in missing.json()["detail"]
    assert http.get("/s/private/who", headers={"Authorization": "Basic dTpw"}).status_code == 401
    assert http.get("/s/private/who", headers=bearer("ct1.999.forged")).status_code == 401
    agent = http.get("/s/private/who", headers=bearer(cred.issue_agent(cred.signing_key(SECRET), "node1")))
    assert agent.status_code == 403 and "agent credential" in agent.json()["detail"]


def test_a_valid_token_passes_and_the_application_sees_the_user_not_the_credential(setup):
    controller, _, http = setup
    _, token = new_token(controller)
    seen = http.get("/s/private/echo", headers=bearer(token))
    assert seen.status_code == 200, seen.text
    headers = seen.json()["headers"]
    assert headers["X-Corral-User"] == "root" and "Authorization" not in headers


def test_a_revoked_token_stops_working_within_the_cache_time(setup):
    controller, _, http = setup
    token_id, token = new_token(controller)
    assert http.get("/s/private/who", headers=bearer(token)).status_code == 200
    assert controller.http.delete(f"/tokens/{token_id}").status_code == 204
    time.sleep(TTL_S + 0.1)
    assert http.get("/s/private/who", headers=bearer(token)).status_code == 401


def test_a_public_service_needs_no_credential_and_passes_the_applications_own(setup):
    _, _, http = setup
    seen = http.get("/s/open/echo", headers=bearer("app-token"))
    assert seen.status_code == 200
    assert seen.json()["headers"]["Authorization"] == "Bearer app-token"


def test_while_the_controller_is_away_only_recently_verified_credentials_pass(tmp_path):
    with Backend("a") as a:
        source = StaticSource(route("private", a, public=False))
        controller_context = live_controller(tmp_path)
        controller = controller_context.__enter__()
        try:
            _, verified = new_token(controller)
            _, unverified = new_token(controller)
            gateway = authenticating_gateway(source, controller.url, SECRET, ttl_s=TTL_S, stale_s=30)
            with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as http:
                assert http.get("/s/private/who", headers=bearer(verified)).status_code == 200
                controller_context.__exit__(None, None, None)
                controller_context = None
                time.sleep(TTL_S + 0.1)  # past the cache time: the controller would be asked again
                stale = http.get("/s/private/who", headers=bearer(verified))
                unknown = http.get("/s/private/who", headers=bearer(unverified))
        finally:
            if controller_context is not None:
                controller_context.__exit__(None, None, None)
    assert (stale.status_code, stale.text) == (200, "a")
    assert unknown.status_code == 503 and "no controller answers" in unknown.json()["detail"]


def test_concurrent_requests_with_one_new_credential_ask_the_controller_once():
    controller = FakeController().start()
    try:
        with Backend("a") as a, ThreadPoolExecutor(16) as pool:
            gateway = authenticating_gateway(StaticSource(route("private", a, public=False)), controller.url,
                                             FAKE_SECRET, ttl_s=30, stale_s=60)
            with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as http:
                codes = list(pool.map(lambda _: http.get("/s/private/who", headers=bearer(FAKE_SECRET)).status_code,
                                      range(16)))
                again = http.get("/s/private/who", headers=bearer(FAKE_SECRET)).status_code
    finally:
        controller.close()
    assert codes == [200] * 16 and again == 200
    assert controller.whoami_calls == 1
