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


def test_what_answers_without_a_credential_is_what_docs_security_md_says(controller) -> None:
    """/openapi.json is public by choice (the docs pages fetch it before "Authorize"), and documented so:
    every route that answers an anonymous request is in security.md's table, and shows no secret."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "security.md").read_text()
    section = text.split("## What answers without a credential", 1)[1].split("\n## ", 1)[0]
    documented = {path.removesuffix("...").rstrip("/") or "/" for path in re.findall(r"`(/[\w./-]*)`", section)}
    anonymous = httpx.Client(base_url=controller.url, timeout=30)
    schema = anonymous.get("/openapi.json")
    assert schema.status_code == 200 and controller.secret not in schema.text
    open_operations = {path for path, operations in schema.json()["paths"].items()
                       for operation in operations.values() if "security" not in operation}
    pages = {"/openapi.json", "/docs", "/redoc", "/"}
    assert open_operations | pages <= documented
    for path in open_operations | pages:
        assert anonymous.get(path).status_code == 200, path
    assert anonymous.get(f"{API}/jobs").status_code == 401
