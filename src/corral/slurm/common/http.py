"""A tiny HTTP/1.1 client for the controller's REST API, one method per call the Slurm commands make.

Plain `http://` goes over `_socket` with one request per connection: `http.client` brings `email`,
`ssl` and `socket` (enum), about 28 ms of start-up that a 20 ms command cannot pay. `https://`
URLs wrap the same exchange in ssl (imported only then), verifying the controller's certificate against the
CA file given (else the system's CAs) and its host name. Bodies are JSON (jsontext); errors are exceptions the
commands turn into Slurm-like messages (common/command.py).

Several controllers: the request goes to their leader (leader.py has the rule). Only a connection that failed
before the request was sent, or a standby's 421, moves it to another controller; a request that may have
reached a leader is never sent again."""
from __future__ import annotations

import _socket
import time
from _collections_abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import repeat

from corral.slurm.common import jsontext, preconnect
from corral.slurm.common.leader import (
    DEFAULT_LEADER_WAIT_S,
    LEADER_HEADER,
    NOT_LEADER_STATUS,
    Controllers,
    NoLeader,
    NotLeader,
    NotSent,
)
from corral.slurm.common.table import JobColumns

TYPE_CHECKING = False  # typing itself is too slow to import on the commands' start-up path
if TYPE_CHECKING:
    from typing import Any

API_PREFIX = "/api/v1"  # corral.protocol.API_PREFIX (a test keeps them equal)
DEFAULT_TIMEOUT_S = 30.0
PAGE_JOBS = 10_000  # jobs per request of a long list: each request holds the controller a bounded time
NEXT_PAGE_HEADER = "x-next-after"  # corral.controller.listing.NEXT_PAGE_HEADER, as read here (lower case)
# Over the controller's request rate limit (HTTP 429), a command sleeps and tries again, as Slurm's do on
# SLURMCTLD_COMMUNICATIONS_BACKOFF (1 s, 2 s, 3 s, ...; never less than the reply's Retry-After, at most
# RATE_LIMIT_MAX_WAIT_S), but gives up after RATE_LIMIT_RETRIES retries where Slurm's never would.
RATE_LIMITED = 429
UNAUTHORIZED = 401
RATE_LIMIT_RETRIES = 5
RATE_LIMIT_MAX_WAIT_S = 10.0
# What a job's line in a listing (squeue, `corral queue`) may read: every JobOut field but the steps, history
# and usage, which cost the controller most to build and the client to parse (a test keeps this in JobOut).
# Asked as `fields=`, the controller sends rows of these values rather than whole records.
JOB_LINE_FIELDS = (
    "id", "name", "user", "state", "reason", "partition", "priority", "submit_time", "start_time", "end_time",
    "estimated_start", "estimated_start_source", "time_limit_s", "elapsed_s", "num_nodes", "tasks_per_node",
    "num_tasks", "gpus_per_node", "cpus_per_task", "mem_per_node_mib", "total_gpus", "nodelist", "slices",
    "gpu_share", "exit_code", "exit_signal", "gpu_seconds", "workdir", "output", "error", "restart_count",
    "account", "qos", "queue", "array_job_id", "array_task_id", "array_throttle", "dependency", "reason_detail",
    "position", "held", "requeue", "expedited_requeue", "reservation", "uid", "submit_host", "comment", "wckey",
    "open_mode", "batch", "allocation", "cancelled_by_uid", "gpu_idle_flagged", "array_task_spec",
    "req_nodelist", "exc_nodelist", "constraint", "exclusive", "estimated_start_window",
    "container_image", "container_mounts", "container_workdir", "container_name", "container_env",
    "container_mount_home", "container_remap_root",
)
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~,")


class ControllerError(Exception):
    """A request that did not get a usable answer."""


class Unreachable(ControllerError):
    def __init__(self, url: str, reason: str, source: str = "") -> None:
        super().__init__(f"cannot reach the controller at {url}: {reason}")
        self.url = url
        self.reason = reason
        self.source = source  # where the URL came from (CORRAL_URL, cluster.json, default)


class NotReached(Unreachable):
    """No controller took the request: it was sent to none (or only a standby refused it), so nothing was
    done. `no_leader` is what each controller said, and how long an election was waited for."""

    def __init__(self, url: str, no_leader: NoLeader, source: str = "") -> None:
        super().__init__(url, no_leader.reason, source)
        self.no_leader = no_leader


class TlsRefused(Unreachable):
    """The TLS handshake failed (a certificate that does not verify, or a server without TLS); the
    message says which, naming the URL and the CA file."""

    def __init__(self, url: str, message: str, source: str = "") -> None:
        super().__init__(url, message, source)
        self.args = (message,)


class ApiError(ControllerError):
    """The controller answered with an error status; `detail` is its explanation."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


def quote(text: str) -> str:
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def query_string(params: Mapping[str, object]) -> str:
    pairs = [f"{quote(k)}={quote(str(v))}" for k, v in params.items() if v is not None]
    return "?" + "&".join(pairs) if pairs else ""


class Endpoint:
    """One controller's address, parsed once."""

    def __init__(self, url: str) -> None:
        self.url = url
        scheme, _, rest = url.partition("://")
        hostport, slash, base = rest.partition("/")
        self.tls = scheme == "https"
        self.host, port = _split_host(hostport)
        self.port = int(port) if port.isdigit() else (443 if self.tls else 80)
        self.base = (slash + base).rstrip("/") + API_PREFIX
        self.host_header = f"Host: {hostport}\r\n"


class Controller:
    def __init__(self, url: str | Iterable[str], secret: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 source: str = "", ca_file: str | None = None,
                 leader_wait_s: float = DEFAULT_LEADER_WAIT_S, reused_from: str | None = None) -> None:
        """`url`: one controller's, or every controller's of a cluster (their leader answers). `reused_from`:
        the auth socket whose credential `secret` is, kept from an earlier call (credential_reuse): if the
        controller refuses it, a request is sent once more with a fresh one from that socket."""
        urls = [url] if isinstance(url, str) else list(url)
        self.controllers = Controllers((u.rstrip("/") for u in urls), leader_wait_s)
        self._endpoints = {u: Endpoint(u) for u in self.controllers.urls}
        self.source = source
        self.ca_file = ca_file  # verifies an https:// controller
        self.timeout_s = timeout_s
        self.reused_from = reused_from
        self._set_secret(secret)

    def _set_secret(self, secret: str | None) -> None:
        self.headers = "Accept: application/json\r\nConnection: close\r\n"
        if secret:
            self.headers += f"Authorization: Bearer {secret}\r\n"

    def _renew_reused_credential(self) -> None:
        """The reused credential was refused (expired early, or signed with a key the controller no longer
        has): forgotten, and a fresh one asked of its auth socket."""
        from corral.slurm.common.credential_reuse import active
        from corral.slurm.common.target import TargetError, socket_credential

        path, self.reused_from = self.reused_from, None
        kept = active()
        if kept is not None and path is not None:
            kept.forget(path)
        try:
            self._set_secret(socket_credential(path or "", kept))
        except TargetError as exc:
            raise Unreachable(path or "", str(exc), self.source) from None

    @property
    def url(self) -> str:
        """The leader's URL, as last found (the first controller's before any request)."""
        return self.controllers.leader

    @property
    def host(self) -> str:
        return self._endpoint(self.url).host

    @property
    def port(self) -> int:
        return self._endpoint(self.url).port

    @property
    def base(self) -> str:
        return self._endpoint(self.url).base

    def _endpoint(self, url: str) -> Endpoint:
        if url not in self._endpoints:  # a leader a standby named
            self._endpoints[url] = Endpoint(url)
        return self._endpoints[url]

    # ----- the API

    def submit(self, body: Mapping) -> dict:
        return self.call("POST", "/jobs", body=body)

    def jobs(self, *, include_finished: bool = False, user: str | Iterable[str] | None = None,
             fields: tuple[str, ...] | None = None, **filters: object) -> list[dict]:
        """Unfinished jobs (`include_finished`: every job), filtered by the controller: `user` names, `ids`
        (an array's id stands for its tasks), `states`, `partitions`, `accounts` (iterables); with
        `combine_arrays`, an array's pending tasks come as one record; with `fields`, records of only
        those fields. Older controllers ignore the filters they do not know: callers filter again."""
        return self.pages("/jobs", {"all": include_finished, "user": user, **filters}, fields)

    def job(self, job_id: int) -> dict:
        return self.call("GET", f"/jobs/{job_id}")

    def act(self, job_id: int, action: str, uid: int | None = None) -> dict:
        """cancel, requeue, hold or release; cancel records who asked (`uid`)."""
        return self.call("POST", f"/jobs/{job_id}/{action}", {"uid": uid})

    def signal(self, job_id: int, signum: int, scope: str, uid: int | None = None) -> dict:
        """scope: "steps" (scancel's default), "batch" (-b) or "full" (-f)."""
        return self.call("POST", f"/jobs/{job_id}/signal", {"signal": signum, "scope": scope, "uid": uid})

    def nodes(self) -> list[dict]:
        return self.call("GET", "/nodes")

    def reservations(self) -> list[dict]:
        return self.call("GET", "/reservations")

    def partitions(self) -> list[dict]:
        return self.call("GET", "/partitions")

    def accounting(self, *, user: str | Iterable[str] | None = None, since: float | None = None,
                   until: float | None = None, ids: Iterable[int] | None = None,
                   fields: tuple[str, ...] | None = None, **filters: object) -> list[dict]:
        """Jobs that existed between `since` and `until`, or the jobs `ids`; other filters and `fields` as
        for jobs()."""
        return [job for page in self.accounting_pages(user=user, since=since, until=until, ids=ids, fields=fields,
                                                      **filters) for job in page]

    def accounting_pages(self, *, user: str | Iterable[str] | None = None, since: float | None = None,
                         until: float | None = None, ids: Iterable[int] | None = None,
                         fields: tuple[str, ...] | None = None, **filters: object) -> Iterator[list[dict]]:
        """accounting() a page at a time, as page_records(): the next page is built while one is used."""
        return self.page_records("/accounting", {"user": user, "since": since, "until": until, "ids": ids,
                                                 **filters}, fields)

    def pages(self, path: str, params: Mapping[str, object], fields: tuple[str, ...] | None = None) -> list[dict]:
        """Every record of a paged list, PAGE_JOBS at a time. Iterables in `params` go comma-separated,
        True as `true`. With `fields`, the controller sends a list per field of every record's value
        (`{"columns": [...]}`); a controller that does not know `columns` sends a row per record, and one
        that does not know `fields` whole records, taken as they are."""
        return [record for page in self.page_records(path, params, fields) for record in page]

    def page_records(self, path: str, params: Mapping[str, object],
                     fields: tuple[str, ...] | None = None) -> Iterator[list[dict]]:
        """pages() a page at a time: the controller builds the next page while the caller uses this one."""
        for page in self._each_page(path, params, fields):
            if fields is not None and isinstance(page, dict):
                yield records_of_columns(fields, page)
            elif fields is not None and page and isinstance(page[0], list):
                yield [dict(zip(fields, row, strict=True)) for row in page]
            else:
                yield page

    def job_columns(self, path: str, params: Mapping[str, object], fields: tuple[str, ...]) -> JobColumns:
        """pages() as columns (table.JobColumns): no dict per record. A controller that sends rows or whole
        records has them turned into columns."""
        gathered: list[list] = [[] for _ in fields]
        for page in self._each_page(path, params, fields):
            if isinstance(page, dict):
                columns = _checked_columns(fields, page)
            else:
                rows = [dict(zip(fields, row, strict=True)) if isinstance(row, list) else row for row in page]
                columns = list(JobColumns.of_records(fields, rows).columns.values())
            for whole, part in zip(gathered, columns, strict=True):
                whole.extend(part)
        return JobColumns(fields, gathered)

    def _each_page(self, path: str, params: Mapping[str, object], fields: tuple[str, ...] | None) -> Iterator[Any]:
        """The decoded pages of a list. Each next page is asked for as soon as a page's headers say where it
        starts, so the controller builds it while this one is decoded and used."""
        query = {key: _param(value) for key, value in params.items()}
        if fields is not None:
            query["fields"] = ",".join(fields)
            query["columns"] = "true"

        def fetch(after: str | None) -> tuple[tuple[int, bytes], dict[str, str]]:
            return self.exchange("GET", path, {**query, "limit": PAGE_JOBS, "after": after}, decode=_undecoded)

        reply = fetch(None)
        while True:
            (status, data), headers = reply
            after = headers.get(NEXT_PAGE_HEADER)  # absent on the last page, or from a controller that does not page
            ahead = _InFlight(lambda after=after: fetch(after)) if after is not None else None
            yield _decoded(status, data)
            if ahead is None:
                return
            reply = ahead.result()

    def priority(self) -> list[dict]:
        return self.call("GET", "/priority")

    def tenancy(self) -> dict:
        return self.call("GET", "/tenancy")

    def fairshare(self) -> list[dict]:
        return self.call("GET", "/fairshare")

    def health(self) -> dict:
        return self.call("GET", "/health")

    # ----- the transport

    def call(self, method: str, path: str, params: Mapping[str, object] | None = None, body: object = None):
        return self.exchange(method, path, params, body)[0]

    def exchange(self, method: str, path: str, params: Mapping[str, object] | None = None, body: object = None,
                 decode: Callable[[int, bytes], Any] | None = None) -> tuple[Any, dict[str, str]]:
        """(the decoded reply, its headers with lower-case names), from the leader; `decode` turns the
        status and body into the reply (raising ApiError for an error status)."""
        tail = path + query_string(params or {})
        payload = jsontext.dumps(body).encode() if body is not None else b""
        content = f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n" if body is not None else ""

        def send(url: str) -> tuple[object, dict[str, str]]:
            endpoint = self._endpoint(url)
            exchange = self._exchange_tls if endpoint.tls else self._exchange

            def once() -> tuple[int, dict[str, str], bytes]:
                head = f"{method} {endpoint.base}{tail} HTTP/1.1\r\n{endpoint.host_header}{self.headers}{content}\r\n"
                return _within_rate_limit(lambda: exchange(endpoint, head.encode() + payload))

            status, headers, data = once()
            if status == UNAUTHORIZED and self.reused_from is not None:  # refused before anything was done
                self._renew_reused_credential()
                status, headers, data = once()
            if status == NOT_LEADER_STATUS:
                raise NotLeader(url, headers.get(LEADER_HEADER.lower()) or _leader_in(data), _detail_of(data))
            return (decode or _decoded)(status, data), headers

        try:
            return self.controllers.call(send)  # type: ignore[return-value]
        except NoLeader as exc:
            raise NotReached(", ".join(self.controllers.urls), exc, self.source) from None

    def _exchange(self, endpoint: Endpoint, request: bytes) -> tuple[int, dict[str, str], bytes]:
        """NotSent if no connection could be made (another controller may be asked); Unreachable if it
        failed once the request was on its way (it may have been acted on: never sent again)."""
        ahead = preconnect.take(endpoint.host, endpoint.port)  # the command helper's, never written on
        if ahead is not None:
            return self._exchange_on(ahead, endpoint, request)
        # An ASCII host goes as bytes: a str would be encoded with the idna codec (~1 ms to import).
        host = endpoint.host.encode() if endpoint.host.isascii() else endpoint.host
        try:
            infos = _socket.getaddrinfo(host, endpoint.port, 0, _socket.SOCK_STREAM)
        except OSError as exc:
            raise NotSent(endpoint.url, exc.strerror or str(exc)) from None
        last: OSError | None = None
        for family, kind, proto, _, address in infos:
            sock = _socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout_s)
                sock.connect(address)
            except OSError as exc:
                sock.close()
                last = exc
                continue
            preconnect.learned(endpoint.host, endpoint.port, family, address)
            return self._exchange_on(sock, endpoint, request)
        raise NotSent(endpoint.url, _reason(last))

    def _exchange_on(self, sock: _socket.socket, endpoint: Endpoint,
                     request: bytes) -> tuple[int, dict[str, str], bytes]:
        """The request on a connection made to `endpoint`, closed after it; Unreachable if it failed once the
        request was on its way (it may have been acted on: never sent again)."""
        try:
            sock.settimeout(self.timeout_s)
            sock.sendall(request)
            return _read_response(sock)
        except OSError as exc:
            raise Unreachable(endpoint.url, self._sent_reason(exc, endpoint), self.source) from None
        finally:
            sock.close()

    def _exchange_tls(self, endpoint: Endpoint, request: bytes) -> tuple[int, dict[str, str], bytes]:
        # https only: ssl (and the socket module it brings) costs ~13 ms of start-up; http.client, ~10 ms
        # more, is not needed: the request and the reply are those of the plain path.
        import socket

        from corral.tls_client import TlsConfigError, client_context, tls_failure

        try:
            context = client_context(self.ca_file)
        except TlsConfigError as exc:
            raise TlsRefused(endpoint.url, str(exc), self.source) from None
        try:
            raw = socket.create_connection((endpoint.host, endpoint.port), timeout=self.timeout_s)
        except OSError as exc:
            raise NotSent(endpoint.url, _reason(exc)) from None
        try:
            with raw, context.wrap_socket(raw, server_hostname=endpoint.host) as sock:
                sock.sendall(request)
                return _read_response(sock)
        except OSError as exc:  # ssl.SSLError is an OSError
            message = tls_failure(exc, endpoint.url, self.ca_file)
            if message:
                raise TlsRefused(endpoint.url, message, self.source) from None
            raise Unreachable(endpoint.url, self._sent_reason(exc, endpoint), self.source) from None

    def _sent_reason(self, error: OSError, endpoint: Endpoint) -> str:
        reason = _reason(error)
        if isinstance(error, ConnectionResetError) and not endpoint.tls:  # what a TLS server does with plain HTTP
            reason += "; if it serves HTTPS, use an https:// URL"
        if len(self.controllers.urls) > 1:
            reason += " (once sent, a request is not sent to another controller: it may have been acted on)"
        return reason


def _within_rate_limit(send: Callable[[], tuple[int, dict[str, str], bytes]]) -> tuple[int, dict[str, str], bytes]:
    """`send()`'s reply, sent again while the controller says the user is over their rate limit."""
    waited_s = 0.0
    for retry in range(1, RATE_LIMIT_RETRIES + 1):
        status, headers, data = send()
        if status != RATE_LIMITED:
            return status, headers, data
        wait_s = retry_wait_s(headers.get("retry-after"), retry)
        time.sleep(wait_s)
        waited_s += wait_s
    status, headers, data = send()
    if status == RATE_LIMITED:
        raise ApiError(status, f"{_error_detail(status, data)} (gave up after {RATE_LIMIT_RETRIES + 1} tries "
                               f"over {waited_s:.0f} s)")
    return status, headers, data


def _undecoded(status: int, data: bytes) -> tuple[int, bytes]:
    """The reply as it came, for _decoded() later (a page decoded while the next one is on its way)."""
    return status, data


class _InFlight:
    """`fetch()` run in a thread of its own: its socket waits without the GIL, so this thread goes on with the
    page before. result() gives what fetch returned, or raises what it raised. `threading` is imported only
    here: a list of one page (most calls) does without."""

    def __init__(self, fetch: Callable[[], Any]) -> None:
        import threading

        self._fetch = fetch
        self._outcome: tuple[bool, Any] = (False, None)
        self._thread = threading.Thread(target=self._run, name="corral-next-page", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome = (True, self._fetch())
        except BaseException as exc:  # handed to the caller by result(), in its own thread
            self._outcome = (False, exc)

    def result(self) -> Any:
        self._thread.join()
        done, value = self._outcome
        if not done:
            raise value
        return value


def records_of_columns(fields: Sequence[str], page: dict) -> list[dict]:
    """A record per job of a page of columns (`columns=true`); ControllerError if they do not fit the fields."""
    columns = _checked_columns(fields, page)
    # map() all the way down: no Python-level loop per record (the columns' lengths are checked).
    return list(map(dict, map(zip, repeat(tuple(fields)), zip(*columns))))  # noqa: B905


def _checked_columns(fields: Sequence[str], page: dict) -> list[list]:
    """The page's columns; ControllerError if they do not fit the fields."""
    columns = page.get("columns")
    if not isinstance(columns, list) or len(columns) != len(fields):
        raise ControllerError(f"the controller sent {_count(columns)} columns for {len(fields)} fields")
    if not all(isinstance(column, list) for column in columns):
        raise ControllerError("the controller sent a column that is not a list")
    if len({len(column) for column in columns}) > 1:
        raise ControllerError("the controller sent columns of different lengths")
    return columns


def _count(columns: object) -> str:
    return str(len(columns)) if isinstance(columns, list) else "no"


def retry_wait_s(retry_after: str | None, retry: int) -> float:
    """How long to sleep before the `retry`-th retry of a rate-limited request."""
    asked = float(retry_after) if retry_after and retry_after.strip().isdigit() else 0.0
    return min(max(asked, float(retry)), RATE_LIMIT_MAX_WAIT_S)


def _param(value: object) -> object:
    if value is True:
        return "true"
    if value is None or value is False or isinstance(value, (str, int, float)):
        return None if value is False else value
    return ",".join(str(item) for item in value)  # an iterable: ids, names, states


def _reason(error: OSError | None) -> str:
    if error is None:
        return "no address"
    return "timed out" if isinstance(error, TimeoutError) else error.strerror or str(error)


def _split_host(hostport: str) -> tuple[str, str]:
    """`host:port`, `host` or `[v6::addr]:port` -> (host, port text or "")."""
    if hostport.startswith("["):
        host, _, after = hostport[1:].partition("]")
        return host, after[1:] if after.startswith(":") else ""
    host, _, port = hostport.partition(":")
    return host, port


def _read_response(sock) -> tuple[int, dict[str, str], bytes]:
    """(status, headers with lower-case names, body) of one response; the server closes the
    connection after it. The body is gathered in pieces and joined once: adding each piece to the
    bytes read so far copied them all again, quadratic in the size (35 s for 80 MB)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError(104, "the controller closed the connection without an answer")
        data += chunk  # the head: a few hundred bytes
    head, _, first = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"]) if "content-length" in headers else None
    pieces, size = [first], len(first)
    while length is None or size < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        pieces.append(chunk)
        size += len(chunk)
    body = b"".join(pieces)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunked(body)
    return status, headers, body if length is None else body[:length]


def _unchunked(data: bytes) -> bytes:
    out, position = [], 0
    while True:
        line_end = data.index(b"\r\n", position)
        size = int(data[position:line_end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[line_end + 2: line_end + 2 + size])
        position = line_end + 2 + size + 2


def _detail_of(data: bytes) -> str:
    try:
        value = jsontext.loads(data)
    except ValueError:
        return ""
    detail = value.get("detail") if isinstance(value, dict) else None
    return detail if isinstance(detail, str) else ""


def _leader_in(data: bytes) -> str | None:
    """The `leader` of a 421's body: the same URL as its header, for a proxy that drops headers."""
    try:
        value = jsontext.loads(data)
    except ValueError:
        return None
    leader = value.get("leader") if isinstance(value, dict) else None
    return leader if isinstance(leader, str) else None


def _decoded(status: int, data: bytes):
    try:
        value = jsontext.loads(data) if data.strip() else None
    except ValueError:
        value = None
    if 200 <= status < 300:
        if value is None and data.strip():
            raise ApiError(status, "the controller sent a reply that is not JSON")
        return value
    raise ApiError(status, _error_detail(status, data, value))


def _error_detail(status: int, data: bytes, value: object = None) -> str:
    """The `detail` of an error reply (its JSON `value`, when decoded already), else its text."""
    if value is None:
        try:
            value = jsontext.loads(data) if data.strip() else None
        except ValueError:
            value = None
    detail = value.get("detail") if isinstance(value, dict) else None
    if isinstance(detail, str):
        return detail
    return str(detail) if detail is not None else data.decode("utf-8", "replace").strip() or f"HTTP {status}"
