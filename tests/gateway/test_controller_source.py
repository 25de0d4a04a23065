"""`corral gateway` as its own process, on a stand-in of the controller's services API: it learns endpoints
from the long poll, follows changes, reports load, and keeps serving its last endpoints while no
controller answers."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.gateway.fake_controller import SECRET, FakeController
from tests.gateway.harness import Backend

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def eventually(check: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time")
        time.sleep(0.1)


@pytest.fixture
def controller():
    fake = FakeController().start()
    yield fake
    fake.close()


@pytest.fixture
def gateway_args():
    return ["--report-every-s", "0.5"]


@contextlib.contextmanager
def running_gateway(controller_urls: str, args: list[str]) -> Iterator[httpx.Client]:
    """`corral gateway` as its own process; its HTTP client once it answers."""
    port = free_port()
    corral = os.path.join(os.path.dirname(sys.executable), "corral")
    log = tempfile.TemporaryFile()
    process = subprocess.Popen([corral, "gateway", "--controller", controller_urls, "--port", str(port), *args],
                               env={**os.environ, "CORRAL_SECRET": SECRET, "XDG_CONFIG_HOME": "/nonexistent"},
                               stderr=log)
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False, timeout=30)
    try:
        eventually(lambda: _answers(http))
        yield http
    finally:
        http.close()
        process.terminate()
        assert process.wait(timeout=15) == 0
        log.close()


@pytest.fixture
def gateway(controller, gateway_args):
    with running_gateway(controller.url, gateway_args) as http:
        yield http


def _answers(http: httpx.Client) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


def _who(http: httpx.Client, service: str = "web") -> str:
    reply = http.get(f"/s/{service}/who")
    return reply.text if reply.status_code == 200 else f"{reply.status_code}"


def test_endpoints_follow_the_controller_and_survive_its_absence(controller, gateway):
    with Backend("a") as a, Backend("b") as b:
        controller.set_endpoints("web", [a.address])
        eventually(lambda: _who(gateway) == "a")
        controller.set_endpoints("web", [a.address, b.address], draining=frozenset({a.address}))
        eventually(lambda: _who(gateway) == "b")
        assert {_who(gateway) for _ in range(4)} == {"b"}  # a drains: nothing new reaches it
        controller.set_endpoints("web", [a.address, b.address])
        eventually(lambda: {_who(gateway) for _ in range(4)} == {"a", "b"})

        controller.stop()  # no controller answers (a failover under way)
        time.sleep(1.5)
        during = [_who(gateway) for _ in range(20)]
        up = gateway.get("/metrics").text
        controller.start()
        controller.set_endpoints("web", [b.address])
        eventually(lambda: {_who(gateway) for _ in range(4)} == {"b"})
    assert set(during) == {"a", "b"}
    assert "corral_gateway_controller_up 0.0" in up


def test_load_reports_reach_the_controller(controller, gateway):
    with Backend("a") as a:
        controller.set_endpoints("web", [a.address])
        eventually(lambda: _who(gateway) == "a")
        for _ in range(10):
            gateway.get("/s/web/who")
        eventually(lambda: any(name == "web" and load["rps"] > 0 for name, load in controller.loads))
    assert all(set(load) == {"inflight", "rps"} for _, load in controller.loads)
    assert {load["inflight"] for _, load in controller.loads} <= {0, 1}  # one client, one request at a time


def test_a_service_created_after_the_last_listing_is_served_on_its_first_request(controller, gateway):
    """The listing runs every 5 s: the first request for a service it has not seen yet lists at once (a user
    who applies a service and curls it straight away gets an answer, not a 404)."""
    time.sleep(0.5)  # the gateway's first listing is done: it found no service
    with Backend("a") as a:
        controller.set_endpoints("fresh", [a.address])
        assert _who(gateway, "fresh") == "a"
    unknown = gateway.get("/s/nosuch/who")
    assert unknown.status_code == 404 and "no service named 'nosuch'" in unknown.text


def test_a_deleted_service_is_no_longer_served(controller, gateway):
    with Backend("a") as a:
        controller.set_endpoints("web", [a.address])
        eventually(lambda: _who(gateway) == "a")
        controller.delete("web")  # the pending long poll answers 404 at once
        eventually(lambda: _who(gateway) == "404", timeout_s=3)


@pytest.mark.parametrize("gateway_args", [["--report-every-s", "60", "--hold-s", "5"]])
def test_a_request_held_for_a_service_without_replicas_is_reported_at_once(controller, gateway):
    controller.set_endpoints("cold", [])
    eventually(lambda: "corral_service_ready_endpoints{service=\"cold\"} 0.0" in gateway.get("/metrics").text)
    with Backend("a") as a:
        start = time.monotonic()
        with httpx.Client(base_url=str(gateway.base_url), trust_env=False, timeout=30) as other:
            answer: list[httpx.Response] = []
            waiter = threading.Thread(target=lambda: answer.append(other.get("/s/cold/who")))
            waiter.start()
            eventually(lambda: any(name == "cold" and load["inflight"] == 1 for name, load in controller.loads),
                       timeout_s=3)  # not at the next round, 60 s away
            reported_s = time.monotonic() - start
            controller.set_endpoints("cold", [a.address])  # the autoscaler brought a replica up
            waiter.join(timeout=10)
    assert reported_s < 3
    assert [(r.status_code, r.text) for r in answer] == [(200, "a")]



def test_a_standby_named_first_sends_the_gateway_to_the_leader(controller):
    standby = FakeController(standby_for=controller.url).start()
    try:
        with Backend("a") as a, running_gateway(f"{standby.url},{controller.url}", []) as gateway:
            controller.set_endpoints("web", [a.address])
            eventually(lambda: _who(gateway) == "a")
    finally:
        standby.close()
