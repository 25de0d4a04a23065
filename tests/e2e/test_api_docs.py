"""The controller's interactive API docs work on a cluster without internet access, and their "Authorize"
button takes the cluster secret: a real controller over HTTP."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.harness import API

pytestmark = pytest.mark.slow

UNSECURED = {"/health", f"{API}/health", "/readyz"}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [value for name, value in attrs if name in ("src", "href", "spec-url") and value]


def page_urls(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.urls + re.findall(r"\burl: '([^']+)'", html)  # the schema URL in Swagger UI's set-up


@pytest.fixture
def controller(cluster_factory):
    return cluster_factory(nodes=0)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_everything_from_the_controller(controller, page) -> None:
    anonymous = httpx.Client(base_url=controller.url, timeout=30)
    reply = anonymous.get(page)
    assert reply.status_code == 200
    assert not re.search(r"(https?:)?//[\w.-]+", reply.text), "no external host"
    urls = page_urls(reply.text)
    assert any(u.endswith(".js") for u in urls) and "/openapi.json" in urls
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc, url
        assert anonymous.get(url).status_code == 200, url


def test_the_schema_declares_the_bearer_secret_on_every_protected_operation(controller) -> None:
    schema = controller.http.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values() if s["type"] == "http"] == ["bearer"]
    (name,) = schemes
    anonymous = httpx.Client(base_url=controller.url, timeout=30)
    unsecured = set()
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            url = re.sub(r"\{[^}]+\}", "1", path)
            if operation.get("security") != [{name: []}]:
                unsecured.add(path)
                continue
            reply = anonymous.request(method, url)
            assert reply.status_code == 401, (method, path, reply.text)
            assert reply.headers["www-authenticate"] == "Bearer"
            authorized = anonymous.request(method, url, headers={"Authorization": f"Bearer {controller.secret}"})
            assert authorized.status_code != 401, (method, path)
    assert unsecured == UNSECURED


def test_health_answers_at_the_root_and_under_the_api(controller) -> None:
    for path in sorted(UNSECURED):
        reply = httpx.get(controller.url + path, timeout=30)
        assert reply.status_code == 200 and reply.json()["status"] == "ok", path
