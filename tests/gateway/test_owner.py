"""A session's route (a notebook) is its owner's alone, and a browser reaches it with a cookie: the real
controller checks the credentials; a link with `?corral_token=` sets the cookie and redirects without it; the
cookie then opens HTTP and WebSockets for the owner, never reaches the application, and opens nothing for
another user."""
from __future__ import annotations

import asyncio

import aiohttp
import httpx
import pytest

from corral.gateway.routes import ServiceRoute
from corral.gateway.sources import StaticSource
from tests.controller.live import SECRET, live_controller
from tests.gateway.harness import Backend, authenticating_gateway, static_gateway


@pytest.fixture
def setup(tmp_path):
    with live_controller(tmp_path) as controller, Backend("nb") as backend:
        source = StaticSource(ServiceRoute("mine", (backend.endpoint,), owner="root"),
                              ServiceRoute("theirs", (backend.endpoint,), owner="someone-notebook"))
        gateway = authenticating_gateway(source, controller.url, SECRET, ttl_s=5, stale_s=30)
        with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as http:
            reply = controller.http.post("/tokens", json={"user": "root", "description": "owner test"})
            assert reply.status_code == 201, reply.text
            yield gateway, http, reply.json()["token"]


def test_the_owner_passes_and_another_user_gets_403(setup):
    _, http, token = setup
    headers = {"Authorization": f"Bearer {token}"}
    assert http.get("/s/mine/who", headers=headers).text == "nb"
    refused = http.get("/s/theirs/who", headers=headers)
    assert refused.status_code == 403
    assert refused.json()["detail"] == ("theirs is someone-notebook's session: only someone-notebook may open it, "
                                        "not root")


def test_a_link_with_the_credential_sets_a_path_cookie_and_redirects_without_it(setup):
    _, http, token = setup
    first = http.get(f"/s/mine/echo/lab?x=1&corral_token={token}")
    assert first.status_code == 303 and first.headers["location"] == "/s/mine/echo/lab?x=1"
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"corral_token={token};") and "Path=/s/mine/" in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    seen = http.get("/s/mine/echo/lab?x=1", headers={"Cookie": f"_xsrf=abc; corral_token={token}"})
    assert seen.status_code == 200, seen.text
    upstream = seen.json()["headers"]
    assert upstream["Cookie"] == "_xsrf=abc" and upstream["X-Corral-User"] == "root"
    assert http.get("/s/theirs/who", headers={"Cookie": f"corral_token={token}"}).status_code == 403
    assert http.get("/s/mine/who", headers={"Cookie": "corral_token=ct1.9.forged"}).status_code == 401
    assert http.get("/s/mine/who?corral_token=a;b").status_code == 400


def test_a_websocket_opens_with_the_cookie_for_the_owner_only(setup):
    gateway, _, token = setup

    async def talk(service: str) -> str:
        async with aiohttp.ClientSession(cookies={"corral_token": token}) as session:
            try:
                async with session.ws_connect(f"{gateway.url}/s/{service}/ws", protocols=("echo",)) as ws:
                    await ws.send_str("hi")
                    return str((await ws.receive(timeout=10)).data)
            except aiohttp.WSServerHandshakeError as refused:
                return f"refused {refused.status}"

    assert asyncio.run(talk("mine")) == "nb:hi"
    assert asyncio.run(talk("theirs")) == "refused 403"


def test_a_kept_prefix_reaches_the_application_whole_and_others_lose_it(tmp_path):

    with Backend("nb") as backend:
        gateway, _ = static_gateway(ServiceRoute("nb", (backend.endpoint,), public=True, keep_prefix=True),
                                    ServiceRoute("web", (backend.endpoint,), public=True))
        with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as http:
            assert http.get("/s/web/echo/x?a=1").json()["path"] == "/echo/x?a=1"
            # The backend answers /echo only: the kept prefix is what it sees (404 from the application itself).
            whole = http.get("/s/nb/echo/x?a=1")
            assert whole.status_code == 404 and "no service named" not in whole.text


def test_a_sessions_upstream_authorization_replaces_the_callers(setup):
    _, http, token = setup
    # The fixture's routes have none: the caller's credential is dropped and nothing takes its place.
    plain = http.get("/s/mine/echo", headers={"Authorization": f"Bearer {token}"}).json()["headers"]
    assert "Authorization" not in plain
    with Backend("nb2") as backend:
        gateway, _ = static_gateway(
            ServiceRoute("nb", (backend.endpoint,), public=False, upstream_authorization="token s3cret"))
        with gateway, httpx.Client(base_url=gateway.url, trust_env=False, timeout=30) as direct:
            seen = direct.get("/s/nb/echo", headers={"Authorization": "Bearer users-own"}).json()["headers"]
    assert seen["Authorization"] == "token s3cret"
