"""The commands' HTTP client and JSON codec, against a small stdlib HTTP server."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.protocol import API_PREFIX
from corral.slurm.common import http, jsontext
from tests.e2e.harness import free_port

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)


@given(JSON_VALUES)
def test_json_round_trips_like_the_json_module(value):
    assert json.loads(jsontext.dumps(value)) == value
    assert jsontext.loads(json.dumps(value)) == value


@pytest.mark.parametrize("text", ["", "{", "[1,]", "1 2", "nul"])
def test_invalid_json_is_a_value_error(text):
    with pytest.raises(ValueError):
        jsontext.loads(text)


def test_api_prefix_is_the_controllers():
    assert http.API_PREFIX == API_PREFIX


def test_query_strings_quote_what_urls_cannot_hold():
    assert http.query_string({"user": "a b/é", "ids": "1,2", "all": None}) == "?user=a%20b%2F%C3%A9&ids=1,2"
    assert http.query_string({"all": None}) == ""


class _Handler(BaseHTTPRequestHandler):
    replies: dict = {}  # path -> (status, body bytes, chunked)
    seen: list = []

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), self.rfile.read(length)))
        status, body, chunked = self.replies.get(self.path.partition("?")[0], (404, b'{"detail":"nope"}', False))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(body), 3):
                part = body[start:start + 3]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    do_GET = do_POST = _answer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    _Handler.replies, _Handler.seen = {}, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, _Handler
    httpd.shutdown()
    httpd.server_close()


def test_requests_carry_the_secret_and_json(server):
    httpd, handler = server
    handler.replies = {f"{API_PREFIX}/jobs": (201, b'{"job_id": 7, "task_ids": []}', False)}
    controller = http.Controller(f"http://127.0.0.1:{httpd.server_port}/", "s3cret")
    assert controller.submit({"name": "x", "env": {"K": "v"}}) == {"job_id": 7, "task_ids": []}
    method, path, auth, body = handler.seen[0]
    assert (method, path, auth, json.loads(body)) == ("POST", f"{API_PREFIX}/jobs", "Bearer s3cret",
                                                      {"name": "x", "env": {"K": "v"}})


def test_chunked_replies_and_query_parameters(server):
    httpd, handler = server
    handler.replies = {f"{API_PREFIX}/accounting": (200, json.dumps([{"id": i} for i in range(50)]).encode(), True)}
    controller = http.Controller(f"http://127.0.0.1:{httpd.server_port}")
    assert controller.accounting(ids=[1, 2], since=1.5) == [{"id": i} for i in range(50)]
    assert handler.seen[0][1] == f"{API_PREFIX}/accounting?since=1.5&ids=1,2&limit={http.PAGE_JOBS}"


def test_a_large_reply_is_read_whole_in_linear_time(server):
    """66 MB: adding each received piece to the bytes read so far took tens of seconds."""
    httpd, handler = server
    records = [{"id": i, "text": f"{i:06d}" * 10_000} for i in range(1_100)]
    handler.replies = {f"{API_PREFIX}/jobs": (200, json.dumps(records).encode(), False)}
    controller = http.Controller(f"http://127.0.0.1:{httpd.server_port}")
    started = time.perf_counter()
    assert controller.jobs() == records
    assert time.perf_counter() - started < 5.0


class _PagingHandler(BaseHTTPRequestHandler):
    """Jobs 1..7 in pages of the asked size, as the controller pages them (X-Next-After)."""

    protocol_version = "HTTP/1.1"
    seen: list = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        query = dict(part.split("=", 1) for part in self.path.partition("?")[2].split("&") if part)
        self.seen.append(query)
        after, limit = int(query.get("after", 0)), int(query["limit"])
        page = [{"id": i} for i in range(after + 1, 8)][:limit]
        body = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if len(page) == limit:
            self.send_header("X-Next-After", str(page[-1]["id"]))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_long_lists_come_a_page_at_a_time(monkeypatch):
    monkeypatch.setattr(http, "PAGE_JOBS", 3)
    _PagingHandler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _PagingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        controller = http.Controller(f"http://127.0.0.1:{httpd.server_port}")
        assert controller.jobs(user=["a", "b"], states=("PENDING",), combine_arrays=True) == [
            {"id": i} for i in range(1, 8)]
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [q.get("after") for q in _PagingHandler.seen] == [None, "3", "6"]
    assert _PagingHandler.seen[0] == {"user": "a,b", "states": "PENDING", "combine_arrays": "true", "limit": "3"}


def test_job_columns_gather_every_page(monkeypatch):
    """Pages (here whole records, from a controller that sends no columns) joined into one column per field."""
    monkeypatch.setattr(http, "PAGE_JOBS", 3)
    _PagingHandler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _PagingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        table = http.Controller(f"http://127.0.0.1:{httpd.server_port}").job_columns("/jobs", {}, ("id",))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert table.column("id") == list(range(1, 8))
    assert [q.get("after") for q in _PagingHandler.seen] == [None, "3", "6"]


def test_error_statuses_carry_the_detail(server):
    httpd, _ = server
    with pytest.raises(http.ApiError) as caught:
        http.Controller(f"http://127.0.0.1:{httpd.server_port}").job(5)
    assert (caught.value.status, caught.value.detail) == (404, "nope")


def test_a_closed_port_is_unreachable():
    with pytest.raises(http.Unreachable) as caught:
        http.Controller(f"http://127.0.0.1:{free_port()}", source="CORRAL_URL").nodes()
    assert caught.value.reason == "Connection refused" and caught.value.source == "CORRAL_URL"


@pytest.mark.parametrize(("url", "host", "port", "base"), [
    ("http://h:81", "h", 81, API_PREFIX), ("http://h", "h", 80, API_PREFIX),
    ("https://h/x/", "h", 443, f"/x{API_PREFIX}"), ("http://[::1]:82", "::1", 82, API_PREFIX),
])
def test_urls(url, host, port, base):
    controller = http.Controller(url)
    assert (controller.host, controller.port, controller.base) == (host, port, base)


def test_commands_report_failures_as_slurm_like_lines(capsys):
    from corral.slurm.common.command import run

    def refused():
        raise http.ApiError(401, "missing or wrong cluster secret")

    assert run("squeue", refused) == 1
    assert capsys.readouterr().err.startswith(
        "squeue: error: the controller refused the credential (missing or wrong cluster secret)")

    def unreachable():
        raise http.Unreachable("http://h:1", "Connection refused", "CORRAL_URL")

    assert run("sinfo", unreachable) == 1
    assert capsys.readouterr().err == (
        "sinfo: error: Unable to contact slurm controller (connect failure)\n"
        "sinfo: error: corral's controller at http://h:1 (from CORRAL_URL) did not answer: Connection refused; "
        "is 'corral up' running?\n")


class _ProjectingHandler(BaseHTTPRequestHandler):
    """Jobs 1..5 as a controller of each generation sends them: whole records (knows no `fields`), rows
    (knows `fields`, not `columns`), columns, or broken columns."""

    protocol_version = "HTTP/1.1"
    sends = "columns"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        query = dict(part.split("=", 1) for part in self.path.partition("?")[2].split("&") if part)
        jobs = [{"id": i, "user": f"u{i}", "state": "PENDING", "extra": i * 10} for i in range(1, 6)]
        fields = query["fields"].split(",") if "fields" in query else None
        if self.sends == "whole" or fields is None:
            page: object = jobs
        elif self.sends == "rows":
            page = [[job[name] for name in fields] for job in jobs]
        elif self.sends == "columns":
            assert query.get("columns") == "true"
            page = {"columns": [[job[name] for job in jobs] for name in fields]}
        else:
            page = {"columns": [[job[name] for job in jobs] for name in fields[1:]]}
        body = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("sends", ["columns", "rows", "whole"])
def test_projected_lists_read_alike_from_every_controller_generation(sends):
    """The commands ask for columns; an older controller's rows, or whole records, give the same records."""
    _ProjectingHandler.sends = sends
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ProjectingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        controller = http.Controller(f"http://127.0.0.1:{httpd.server_port}")
        jobs = controller.jobs(fields=("state", "id"))
    finally:
        httpd.shutdown()
        httpd.server_close()
    expected = [{"state": "PENDING", "id": i} for i in range(1, 6)]
    assert [{k: job[k] for k in ("state", "id")} for job in jobs] == expected
    assert all("extra" in job for job in jobs) == (sends == "whole")


@pytest.mark.parametrize("sends", ["columns", "rows", "whole"])
def test_job_columns_read_alike_from_every_controller_generation(sends):
    """job_columns keeps the columns as sent (squeue, corral queue); rows or whole records become columns."""
    _ProjectingHandler.sends = sends
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ProjectingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        table = http.Controller(f"http://127.0.0.1:{httpd.server_port}").job_columns("/jobs", {}, ("state", "id"))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(table) == 5
    assert table.column("id") == [1, 2, 3, 4, 5]
    assert table.column("state") == ["PENDING"] * 5
    assert table.records() == [{"state": "PENDING", "id": i} for i in range(1, 6)]


def test_columns_that_do_not_match_the_fields_are_refused():
    _ProjectingHandler.sends = "broken"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _ProjectingHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(http.ControllerError, match="the controller sent 1 columns for 2 fields"):
            http.Controller(f"http://127.0.0.1:{httpd.server_port}").jobs(fields=("state", "id"))
    finally:
        httpd.shutdown()
        httpd.server_close()


class _BrokenPageHandler(_PagingHandler):
    """Pages as _PagingHandler's, but the page after `broken_after` is not JSON (with `status`)."""

    broken_after = "0"
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        query = dict(part.split("=", 1) for part in self.path.partition("?")[2].split("&") if part)
        if query.get("after", "0") != self.broken_after:
            super().do_GET()
            return
        self.seen.append(query)
        body = b"not json"
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Next-After", str(int(self.broken_after) + int(query["limit"])))
        self.end_headers()
        self.wfile.write(body)


@pytest.mark.parametrize(("broken_after", "status", "asked"), [
    ("0", 200, [None, "3"]),  # the first page: the second is already asked for when its body is decoded
    ("3", 500, [None, "3", "6"]),  # a later page fetched in a thread: its error is raised all the same
])
def test_the_next_page_is_asked_for_while_a_page_is_decoded(monkeypatch, broken_after, status, asked):
    monkeypatch.setattr(http, "PAGE_JOBS", 3)
    monkeypatch.setattr(_BrokenPageHandler, "broken_after", broken_after)
    monkeypatch.setattr(_BrokenPageHandler, "status", status)
    _BrokenPageHandler.seen = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _BrokenPageHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(http.ApiError) as caught:
            http.Controller(f"http://127.0.0.1:{httpd.server_port}").jobs()
        assert caught.value.status == status
        deadline = time.monotonic() + 5.0  # the request in flight when the error was raised
        while len(_BrokenPageHandler.seen) < len(asked) and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert [q.get("after") for q in _BrokenPageHandler.seen] == asked
