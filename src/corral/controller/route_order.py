"""The hot routes first in the router's scan, where that cannot change which route answers any request.

Starlette's router tries its routes in order, a regular expression and a scope copy each, and takes the
first full match (path and method), else the first partial one (path only: 405). The agents' event posts
and command polls come last of 64 routes, so that every poll tried about 60 patterns first (bench/http_cost.py).
Moving a route X ahead of a route B changes nothing for any request if no path can match both X and B:
for every path, the routes that match it stay in the same order. `could_share_a_path` decides that from
the two path templates, and says yes whenever it cannot tell (a Mount, a parameter inside a segment,
a `path` parameter), so that such a route is never passed.

The OpenAPI document lists routes in the order they were declared, and is built over that order."""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from fastapi import FastAPI
from starlette.routing import BaseRoute, Mount, Route

_WHOLE_PARAMETER = re.compile(r"^\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<kind>[A-Za-z_]+))?\}$")


class _Template:
    """A route's path as segments; `open_end`: it also matches any longer path (a Mount, a `path` param)."""

    def __init__(self, route: BaseRoute) -> None:
        self.known = isinstance(route, (Route, Mount))
        path: str = getattr(route, "path", "")
        self.open_end = isinstance(route, Mount)
        self.convertors = dict(getattr(route, "param_convertors", {}))
        self.segments: list[str] = []
        for segment in path.strip("/").split("/") if path.strip("/") else []:
            whole = _WHOLE_PARAMETER.match(segment)
            if whole and whole["kind"] == "path":
                self.open_end = True
                break
            if "{" in segment and not whole:
                self.known = False  # a parameter inside a segment (file.{ext}): not worth reasoning about
            self.segments.append(segment)

    def segment_matches(self, segment: str, literal: str) -> bool:
        """Whether this template's `segment` can match the literal path segment `literal`."""
        whole = _WHOLE_PARAMETER.match(segment)
        if whole is None:
            return segment == literal
        convertor = self.convertors.get(whole["name"])
        return convertor is None or re.fullmatch(convertor.regex, literal) is not None


def could_share_a_path(first: BaseRoute, second: BaseRoute) -> bool:
    """False only when no request path can match both routes' templates."""
    a, b = _Template(first), _Template(second)
    if not (a.known and b.known):
        return True
    for index in range(max(len(a.segments), len(b.segments))):
        if index >= len(a.segments) or index >= len(b.segments):
            shorter = a if index >= len(a.segments) else b
            return shorter.open_end
        left, right = a.segments[index], b.segments[index]
        left_is_parameter = _WHOLE_PARAMETER.match(left) is not None
        right_is_parameter = _WHOLE_PARAMETER.match(right) is not None
        if left_is_parameter and right_is_parameter:
            continue
        if left_is_parameter and not a.segment_matches(left, right):
            return False
        if right_is_parameter and not b.segment_matches(right, left):
            return False
        if not left_is_parameter and not right_is_parameter and left != right:
            return False
    return True


def hot_routes_first(routes: list[BaseRoute], hot: Iterable[tuple[str, str]],
                     app: FastAPI | None = None) -> list[BaseRoute]:
    """`routes` reordered in place: each (method, path template) of `hot` moved towards the front, past
    every route that can share no path with it (so, never past another route of the same path).
    Returns the hot routes. With `app` (whose router holds `routes`), its OpenAPI document keeps listing
    the routes as declared (`declared_order_openapi`)."""
    declared = list(routes)
    chosen = sorted((_find(routes, method, path) for method, path in hot), key=routes.index)
    for route in chosen:
        position = routes.index(route)
        target = position
        while target > 0 and not could_share_a_path(routes[target - 1], route):
            target -= 1
        routes.insert(target, routes.pop(position))
    if app is not None:
        app.openapi = declared_order_openapi(app, routes, declared)  # type: ignore[method-assign]
    return chosen


def declared_order_openapi(app: FastAPI, routes: list[BaseRoute], declared: list[BaseRoute]):
    """app.openapi, built (once, when first asked: it takes about 0.2 s of CPU) over the routes in their
    declared order. Building it is synchronous: no request is routed while the order is swapped back."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        serving = list(routes)
        routes[:] = declared
        try:
            return build()
        finally:
            routes[:] = serving

    return openapi


def _find(routes: Sequence[BaseRoute], method: str, path: str) -> BaseRoute:
    for route in routes:
        if getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ()):
            return route
    raise LookupError(f"no route {method} {path}")
