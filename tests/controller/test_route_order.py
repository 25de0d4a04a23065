"""The hot routes are tried first (controller/route_order.py) without changing which route answers any
request: the winner (first full match, else first partial one: Starlette's rule) of every request path
the app's routes can take, with every method, is the same in the declared order and the reordered one."""
from __future__ import annotations

import random

from starlette.routing import Match, Mount, Route

from corral.controller.app import HOT_ROUTES
from corral.controller.route_order import could_share_a_path, hot_routes_first
from tests.controller.conftest import open_api

METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD")


def winner(routes, method: str, path: str):
    partial = None
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": [], "query_string": b""}
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return route
        if match == Match.PARTIAL and partial is None:
            partial = route
    return partial


def sample_paths(routes) -> set[str]:
    """Paths each route takes, with its parameters filled in as literals that other routes name too."""
    literals = {"7", "x", "stats", "commands", "events", "jobs", "register", "join"}
    paths = set()
    for route in routes:
        template = getattr(route, "path", "/")
        for value in literals:
            filled = template
            for name in getattr(route, "param_convertors", {}):
                filled = filled.replace(f"{{{name}}}", value).replace(f"{{{name}:int}}", value)
            paths.add(filled + ("/x" if isinstance(route, Mount) else ""))
    return paths


def assert_same_answers(before, after) -> None:
    for path in sample_paths(before):
        for method in METHODS:
            assert winner(after, method, path) is winner(before, method, path), (method, path)


def test_the_app_tries_the_hot_routes_first(tmp_path) -> None:
    routes = open_api(tmp_path, []).app.router.routes
    firsts = [(sorted(route.methods)[0], route.path) for route in routes[:len(HOT_ROUTES)]]
    assert sorted(firsts) == sorted(HOT_ROUTES)


def test_moving_any_route_forward_changes_no_answer(tmp_path) -> None:
    declared = list(open_api(tmp_path, []).app.router.routes)
    routable = [(sorted(r.methods)[0], r.path) for r in declared if isinstance(r, Route) and r.methods]
    rng = random.Random(24)
    for _ in range(20):
        reordered = list(declared)
        hot_routes_first(reordered, rng.sample(routable, 6))
        assert_same_answers(declared, reordered)


def test_a_route_never_passes_one_that_could_take_its_paths() -> None:
    async def endpoint(_request):  # pragma: no cover - never called
        return None

    by_id = Route("/api/v1/jobs/{job_id:int}", endpoint, methods=["GET"])
    any_name = Route("/api/v1/jobs/{name}", endpoint, methods=["GET"])
    stats = Route("/api/v1/jobs/stats", endpoint, methods=["GET"])
    mount = Mount("/api/v1/files", routes=[])
    files = Route("/api/v1/files/list", endpoint, methods=["GET"])
    routes = [by_id, any_name, mount, stats, files]
    hot_routes_first(routes, [("GET", "/api/v1/jobs/stats"), ("GET", "/api/v1/files/list")])
    assert routes == [by_id, any_name, stats, mount, files]  # stats passes only the int route
    assert not could_share_a_path(by_id, stats) and could_share_a_path(any_name, stats)
    assert could_share_a_path(mount, files) and not could_share_a_path(mount, stats)
