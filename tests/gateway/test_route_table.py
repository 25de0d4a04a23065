"""The route table's choice, as a table: least in-flight first, round-robin among equals, tried ones skipped,
removed endpoints get nothing new while their leases finish."""
from __future__ import annotations

import pytest

from corral.gateway.routes import EJECT_S, Endpoint, RouteTable, ServiceRoute

A, B, C = Endpoint("10.0.0.1:80"), Endpoint("10.0.0.2:80"), Endpoint("10.0.0.3:80")


def table(*endpoints: Endpoint) -> RouteTable:
    routes = RouteTable()
    routes.publish(ServiceRoute("web", endpoints))
    return routes


@pytest.mark.parametrize(("busy", "exclude", "want"), [
    ({A: 1}, set(), B),             # the idle one
    ({A: 2, B: 1}, set(), C),
    ({A: 1, B: 1, C: 2}, {A.address}, B),
    ({}, {A.address, B.address, C.address}, None),  # every replica tried
])
def test_pick_takes_the_least_busy_untried_endpoint(busy, exclude, want):
    routes = table(A, B, C)
    leases = [routes.lease("web", e) for e, n in busy.items() for _ in range(n)]
    for lease in leases:
        lease.__enter__()
    assert routes.pick("web", exclude) == want


def test_equal_endpoints_are_taken_in_turn():
    routes = table(A, B, C)
    assert [routes.pick("web") for _ in range(6)] == [A, B, C, A, B, C]


def test_a_removed_endpoint_gets_no_new_request_and_its_lease_ends_cleanly():
    routes = table(A, B)
    with routes.lease("web", A):
        routes.publish(ServiceRoute("web", (B,)))
        assert {routes.pick("web") for _ in range(4)} == {B}
        assert routes.inflight("web") == 1  # the request on A still counts until it finishes
    assert routes.inflight("web") == 0


def test_an_unknown_or_forgotten_service_has_no_endpoint():
    routes = table(A)
    assert routes.pick("other") is None
    routes.forget("web")
    assert routes.route("web") is None and routes.pick("web") is None


def test_an_endpoint_that_failed_is_passed_over_for_a_while_unless_it_is_the_last():
    now = [100.0]
    routes = RouteTable(clock=lambda: now[0])
    routes.publish(ServiceRoute("web", (A, B)))
    routes.failed(A)
    assert {routes.pick("web") for _ in range(4)} == {B}
    assert routes.pick("web", {B.address}) == A  # every other one tried: the failed one gets its chance
    now[0] += EJECT_S
    assert {routes.pick("web") for _ in range(4)} == {A, B}
