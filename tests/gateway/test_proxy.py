"""The gateway in front of real replica processes on loopback: least in-flight, retries when a replica is
killed under load, streaming, WebSockets, endpoint changes and draining."""
from __future__ import annotations

import asyncio
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import httpx
import pytest

from tests.gateway.harness import Backend, route, static_gateway


@pytest.fixture
def replicas():
    with Backend("a") as a, Backend("b") as b:
        yield a, b


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, trust_env=False, timeout=30)


def metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    match = re.search(rf"^{name}\{{{re.escape(wanted)}\}} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def test_least_inflight_sends_new_requests_to_the_idle_replica(replicas):
    a, b = replicas
    gateway, _ = static_gateway(route("web", a, b))
    with gateway, client(gateway.url) as http, ThreadPoolExecutor(1) as pool:
        slow = pool.submit(http.get, "/s/web/slow?s=2")
        time.sleep(0.5)  # the slow request is on one replica now
        answers = [http.get("/s/web/who").text for _ in range(6)]
        busy = slow.result().text
    idle = ({"a", "b"} - {busy}).pop()
    assert answers == [idle] * 6  # round-robin would have sent half of them to the busy replica


def test_a_replica_killed_under_load_fails_no_idempotent_request(replicas):
    a, b = replicas
    gateway, _ = static_gateway(route("web", a, b))  # a stays listed: the gateway must route around it
    answered: list[str] = []
    failures: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with client(gateway.url) as http:
            while not stop.is_set():
                reply = http.get("/s/web/who")
                (answered if reply.status_code == 200 else failures).append(reply.text)

    with gateway:
        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        time.sleep(1.0)
        a.kill()
        killed_at = len(answered)
        time.sleep(1.5)
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        metrics = client(gateway.url).get("/metrics").text
    assert failures == []
    assert "a" in answered[:killed_at] and len(answered) > killed_at + 20
    assert set(answered[killed_at + 8:]) == {"b"}
    retries = metric(metrics, "corral_service_retries_total", service="web")
    assert 1 <= retries <= 12  # the dead replica is passed over, not tried by every other request


def test_a_request_with_a_body_goes_to_another_replica_when_its_replica_refuses_the_connection(replicas):
    """A refused connection never reached the application: even a POST is safe to send elsewhere (a replica
    that has just died or been stopped, before the gateway learns it)."""
    a, b = replicas
    gateway, _ = static_gateway(route("web", a, b))
    a.kill()
    with gateway, client(gateway.url) as http:
        replies = [http.post("/s/web/echo", content=b"charge the card") for _ in range(4)]
    assert [r.status_code for r in replies] == [200] * 4
    assert {r.json()["name"] for r in replies} == {"b"} and replies[0].json()["body"] == "charge the card"


def test_a_request_with_a_body_is_not_sent_twice_once_its_replica_took_it(replicas):
    a, b = replicas
    gateway, _ = static_gateway(route("web", a))
    with gateway, client(gateway.url) as http, ThreadPoolExecutor(1) as pool:
        post = pool.submit(http.post, "/s/web/slow?s=5", content=b"charge the card")
        time.sleep(1.0)  # the replica has read it and is working on it
        a.kill()
        reply = post.result()
    assert reply.status_code == 502 and "not retried" in reply.json()["detail"]


def test_a_request_with_no_replica_left_gets_502_naming_each_failure(replicas):
    a, b = replicas
    gateway, _ = static_gateway(route("web", a))
    a.kill()
    with gateway, client(gateway.url) as http:
        post = http.post("/s/web/echo", content=b"charge the card")
        get = http.get("/s/web/who")
    assert post.status_code == 502 and "every ready replica failed" in post.json()["detail"]
    assert get.status_code == 502 and "every ready replica failed" in get.json()["detail"]


def test_server_sent_events_arrive_as_they_are_produced(replicas):
    a, _ = replicas
    gateway, _ = static_gateway(route("llm", a))
    with gateway, client(gateway.url) as http:
        for path, first in (("/s/llm/sse?n=5&gap=0.4", b"data: token-0\n\n"),
                            ("/s/llm/chunks?n=5&gap=0.4", b"chunk-0;")):
            start = time.monotonic()
            with http.stream("GET", path) as stream:
                assert stream.headers.get("content-length") is None
                arrivals = [(time.monotonic() - start, chunk) for chunk in stream.iter_raw()]
            assert arrivals[0][1] == first
            assert arrivals[0][0] < 1.0  # the first token before the last is produced (1.6 s in)
            assert arrivals[-1][0] >= 1.5
            assert b"".join(c for _, c in arrivals).count(first[:5]) == 5


def test_websocket_messages_and_close_code_pass_through(replicas):
    a, _ = replicas
    gateway, _ = static_gateway(route("chat", a))

    async def talk(url: str) -> tuple[str, bytes, int | None, str | None]:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(f"{url}/s/chat/ws", protocols=("echo",)) as ws:
                await ws.send_str("hi")
                text = (await ws.receive(timeout=10)).data
                await ws.send_bytes(b"\x00\x01")
                binary = (await ws.receive(timeout=10)).data
                await ws.send_str("close")
                await ws.receive(timeout=10)
                return text, binary, ws.close_code, ws.protocol

    with gateway:
        assert asyncio.run(talk(gateway.url)) == ("a:hi", b"\x00\x01", 4001, "echo")


def test_endpoint_changes_lose_no_request_in_flight(replicas):
    a, b = replicas
    gateway, source = static_gateway(route("web", a))
    with gateway, client(gateway.url) as http, ThreadPoolExecutor(4) as pool, Backend("c") as c:
        in_flight = [pool.submit(http.get, "/s/web/slow?s=1.5") for _ in range(3)]
        time.sleep(0.4)
        source.publish(route("web", b, version=1))  # a drains: removed from the set while answering
        after_drain = {http.get("/s/web/who").text for _ in range(4)}
        source.publish(route("web", b, c, version=2))  # c added
        after_add = {http.get("/s/web/who").text for _ in range(6)}
        drained = [f.result() for f in in_flight]
        source.forget("web")
        gone = http.get("/s/web/who")
    assert [(r.status_code, r.text) for r in drained] == [(200, "a")] * 3
    assert after_drain == {"b"} and after_add == {"b", "c"}
    assert gone.status_code == 404


def test_a_service_without_ready_replicas_answers_503(replicas):
    gateway, _ = static_gateway(route("empty"))
    with gateway, client(gateway.url) as http:
        reply = http.get("/s/empty/")
    assert reply.status_code == 503 and reply.headers["retry-after"] == "1"
    assert reply.json()["detail"] == "service empty has no ready replica"


def test_a_request_to_a_service_without_replicas_waits_for_one_up_to_the_hold(replicas):
    a, _ = replicas
    gateway, source = static_gateway(route("cold"), route("dead"), hold_s=3)
    with gateway, client(gateway.url) as http, ThreadPoolExecutor(1) as pool:
        start = time.monotonic()
        waiting = pool.submit(http.get, "/s/cold/who")
        time.sleep(0.8)
        assert not waiting.done()
        source.publish(route("cold", a, version=1))  # a replica became ready (scaled up from zero)
        cold = waiting.result()
        cold_s = time.monotonic() - start
        start = time.monotonic()
        dead = http.get("/s/dead/who")
        dead_s = time.monotonic() - start
    assert (cold.status_code, cold.text) == (200, "a") and 0.8 <= cold_s < 2.5
    assert dead.status_code == 503 and "waited 3 s" in dead.json()["detail"] and 3 <= dead_s < 5


def test_path_query_and_headers_reach_the_replica(replicas):
    a, _ = replicas
    gateway, _ = static_gateway(route("web", a))
    with gateway, client(gateway.url) as http:
        seen = http.put("/s/web/echo/x%2Fy?q=1&q=2", content=b"body",
                        headers={"X-Corral-User": "mallory", "X-App": "1"}).json()
        head = http.head("/s/web/hello")
        metrics = http.get("/metrics").text
    assert (head.status_code, head.headers["content-length"], head.content) == (200, "13", b"")
    assert (seen["method"], seen["path"], seen["body"]) == ("PUT", "/echo/x%2Fy?q=1&q=2", "body")
    assert seen["headers"]["X-App"] == "1" and seen["headers"]["X-Forwarded-Prefix"] == "/s/web"
    assert "X-Corral-User" not in seen["headers"]  # a client cannot claim to be a user
    assert metric(metrics, "corral_service_requests_total", service="web", code="200") == 2
    assert metric(metrics, "corral_service_request_duration_seconds_count", service="web") == 2


def test_a_replica_lost_mid_stream_cuts_the_clients_response(replicas):
    a, _ = replicas
    gateway, _ = static_gateway(route("llm", a))
    received: list[bytes] = []
    with gateway, client(gateway.url) as http:
        with pytest.raises(httpx.RemoteProtocolError), http.stream("GET", "/s/llm/sse?n=50&gap=0.1") as stream:
            for chunk in stream.iter_raw():
                received.append(chunk)
                if len(received) == 2:
                    a.kill()
        metrics = http.get("/metrics").text
    assert 2 <= len(received) < 50  # never a complete-looking response
    assert metric(metrics, "corral_service_errors_total", service="llm", reason="replica_lost_mid_response") == 1
