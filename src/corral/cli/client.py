"""A small synchronous client for the controller's user API (one method per endpoint).

Replies are returned as the JSON the controller sent (dicts shaped like corral.api.schemas), so the
command line needs neither pydantic nor the schemas at startup.

Given several controllers, requests go to their leader (corral.slurm.common.leader has the rule): only a
connection that failed before the request was sent, or a standby's 421, moves a request to another
controller; one that may have reached a leader is never sent again, so no submission is made twice."""
from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from corral.cli.errors import CliError
from corral.slurm.common.http import ControllerError, records_of_columns
from corral.slurm.common.leader import (
    DEFAULT_LEADER_WAIT_S,
    LEADER_HEADER,
    NOT_LEADER_STATUS,
    Controllers,
    NoLeader,
    NotLeader,
    NotSent,
)

# Equal to corral.protocol.API_PREFIX (a test checks); importing that module would load pydantic.
API_PREFIX = "/api/v1"
PAGE_JOBS = 10_000  # jobs per request of a long list: each request holds the controller a bounded time
# Over the controller's request rate limit (HTTP 429): sleep and try again, as the Slurm commands do
# (corral.slurm.common.http: 1 s, 2 s, ..., at least the reply's Retry-After, at most the max), then give up.
RATE_LIMITED = 429
RATE_LIMIT_RETRIES = 5
RATE_LIMIT_MAX_WAIT_S = 10.0


class ClientError(CliError):
    """The controller refused a request or could not be asked; `detail` is its explanation."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail  # the controller's own words, for a refusal


class ControllerUnreachable(ClientError):
    """No controller took the request; `url` names every one asked, `reason` what they said."""

    def __init__(self, url: str, reason: str | None = None) -> None:
        if reason is None:
            message = f"cannot reach the controller at {url} (is 'corral up' running?)"
        else:
            message = f"no leading controller at {url}: {reason} (is 'corral up' running?)"
        super().__init__(message)
        self.url = url
        self.reason = reason


class TlsRefused(ClientError):
    """The TLS handshake failed: the controller's certificate does not verify, or it does not speak TLS."""


def _tls_context(url: str, ca_file: str | None) -> Any:
    """The verifying SSL context for an https:// URL; httpx's default one for http:// (unused there)."""
    if not url.startswith("https:"):
        return default_ssl_context()
    from corral.tls_client import TlsConfigError, client_context

    try:
        return client_context(ca_file)
    except TlsConfigError as exc:
        raise ClientError(str(exc)) from None


@functools.cache
def default_ssl_context() -> Any:
    """What httpx makes for verify=True (the system's CAs through certifi), made once per process: making it
    loads the CA file, ~60 ms a client; corral's command helper makes it once for all its calls."""
    import httpx

    return httpx.create_ssl_context(trust_env=False)


class Client:
    def __init__(self, url: str | Sequence[str], secret: str | None = None, timeout_s: float = 10.0,
                 ca_file: str | None = None, leader_wait_s: float = DEFAULT_LEADER_WAIT_S) -> None:
        """`url`: one controller's, or every controller's of a cluster (their leader answers, and the client
        remembers which it was). `ca_file` verifies an https:// controller (else the system's trusted CAs
        do). `leader_wait_s`: how long a request waits for an election (leader.py)."""
        import httpx  # imported here: ~100 ms that commands without HTTP should not pay

        urls = [url] if isinstance(url, str) else list(url)
        self.controllers = Controllers((u.rstrip("/") for u in urls), leader_wait_s)
        self.timeout_s = timeout_s
        self.ca_file = ca_file
        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
        # trust_env=False: a controller is on the cluster's own network; an HTTP(S)_PROXY meant for
        # the internet must not capture requests to it.
        self._http = httpx.Client(
            headers=headers, timeout=timeout_s, trust_env=False,
            verify=_tls_context(self.url, ca_file),
        )

    @property
    def url(self) -> str:
        """The leader's URL, as last found (the first controller's before any request)."""
        return self.controllers.leader

    @property
    def urls(self) -> tuple[str, ...]:
        return self.controllers.urls

    def status_of(self, url: str) -> dict:
        """One controller's own /status (its role, epoch, pid and what it knows of its peers), whatever
        its role: asked of that controller alone, never of the leader instead."""
        response = self._send(url, "GET", "/status", {})
        if response.status_code >= 400:
            raise ClientError(error_message(response.status_code, response.text), response.status_code)
        return self._json(response)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def health(self) -> dict:
        return self._call("GET", "/health")

    def submit(self, body: dict) -> dict:
        return self._call("POST", "/jobs", json=body)

    def jobs(self, *, states: Iterable[str] = (), user: str | None = None, include_finished: bool = False,
             ids: Iterable[str] = (), combine_arrays: bool = False,
             fields: Sequence[str] | None = None) -> list[dict]:
        """`ids`: only the jobs these ids name, in Slurm's forms (`N`, `N_I`, `N_[I-J,K]`). `combine_arrays`:
        an array's pending tasks as one record (`array_task_spec`), as squeue shows them. `fields`: records of
        only these fields (the controller sends them as columns)."""
        params = _params(states=_csv(states), user=user, all="true" if include_finished else None, ids=_csv(ids),
                         combine_arrays="true" if combine_arrays else None,
                         fields=",".join(fields) if fields is not None else None,
                         columns="true" if fields is not None else None)
        return self._pages("/jobs", params, fields)

    def job(self, job_id: int) -> dict:
        return self._call("GET", f"/jobs/{job_id}")

    def cancel(self, job_id: int) -> dict:
        return self._call("POST", f"/jobs/{job_id}/cancel")

    def requeue(self, job_id: int) -> dict:
        return self._call("POST", f"/jobs/{job_id}/requeue")

    def hold(self, job_id: int) -> dict:
        return self._call("POST", f"/jobs/{job_id}/hold")

    def release(self, job_id: int) -> dict:
        return self._call("POST", f"/jobs/{job_id}/release")

    def nodes(self) -> list[dict]:
        return self._call("GET", "/nodes")

    def stop_cluster(self, wait_s: float) -> dict:
        """Stop every running job before the cluster stops; the reply comes once they are reported gone
        (or after `wait_s`), so this request may take that long."""
        return self._call("POST", "/cluster/stop", params={"wait_s": f"{wait_s:g}"}, timeout=wait_s + self.timeout_s)

    def partitions(self) -> list[dict]:
        return self._call("GET", "/partitions")

    def accounting(self, *, user: str | None = None, states: Iterable[str] = (), since: float | None = None,
                   until: float | None = None, ids: Iterable[str] = ()) -> list[dict]:
        params = _params(user=user, states=_csv(states), since=_epoch(since), until=_epoch(until), ids=_csv(ids))
        return self._pages("/accounting", params)

    def priority(self) -> list[dict]:
        return self._call("GET", "/priority")

    def fairshare(self) -> list[dict]:
        return self._call("GET", "/fairshare")

    def queues(self) -> list[dict]:
        return self._call("GET", "/queues")

    def tenancy(self) -> dict:
        return self._call("GET", "/tenancy")

    def put_tenancy(self, spec: dict) -> dict:
        return self._call("PUT", "/tenancy", json=spec)

    def scheduler(self) -> dict:
        return self._call("GET", "/scheduler")

    def reservations(self) -> list[dict]:
        return self._call("GET", "/reservations")

    def create_reservation(self, spec: dict) -> dict:
        return self._call("POST", "/reservations", json=spec)

    def delete_reservation(self, name: str) -> None:
        from urllib.parse import quote

        self._call("DELETE", f"/reservations/{quote(name, safe='')}")

    def whoami(self) -> dict:
        return self._call("GET", "/whoami")

    def apply_service(self, spec: dict) -> dict:
        return self._call("POST", "/services", json=spec)

    def services(self) -> list[dict]:
        return self._call("GET", "/services")

    def service(self, name: str) -> dict:
        return self._call("GET", _service_path(name))

    def scale_service(self, name: str, replicas: int) -> dict:
        return self._call("POST", f"{_service_path(name)}/scale", json={"replicas": replicas})

    def restart_service(self, name: str) -> dict:
        return self._call("POST", f"{_service_path(name)}/restart")

    def delete_service(self, name: str) -> None:
        self._call("DELETE", _service_path(name))

    def _pages(self, path: str, params: dict[str, str], fields: Sequence[str] | None = None) -> list[dict]:
        """Every record of a paged list (the controller says where the next page starts); asked with
        `fields`, columns of them (`columns=true`; a controller that does not know `columns` sends rows, one that
        does not know `fields` whole records)."""
        found: list[dict] = []
        page = {**params, "limit": str(PAGE_JOBS)}
        while True:
            response = self._response("GET", path, params=page)
            records = self._json(response)
            if fields is not None and isinstance(records, dict):
                try:
                    records = records_of_columns(fields, records)
                except ControllerError as exc:
                    raise ClientError(str(exc)) from None
            elif fields is not None and records and isinstance(records[0], list):
                records = [dict(zip(fields, row, strict=True)) for row in records]
            found.extend(records)
            after = response.headers.get("X-Next-After")
            if after is None:  # the last page, or a controller that does not page
                return found
            page["after"] = after

    def create_token(self, body: dict) -> dict:
        return self._call("POST", "/tokens", json=body)

    def tokens(self, all_users: bool = False) -> list[dict]:
        return self._call("GET", "/tokens", params={"all": all_users})

    def revoke_token(self, token_id: int) -> None:
        self._call("DELETE", f"/tokens/{token_id}")

    def create_join_token(self, body: dict) -> dict:
        return self._call("POST", "/join-tokens", json=body)

    def join_tokens(self) -> list[dict]:
        return self._call("GET", "/join-tokens")

    def revoke_join_token(self, token_id: int) -> None:
        self._call("DELETE", f"/join-tokens/{token_id}")

    def join(self, node: str) -> dict:
        """Exchange the join token this client holds (its secret) for `node`'s agent credential."""
        return self._call("POST", "/agents/join", json={"node": node})

    def audit(self, since: float | None = None, limit: int = 1000) -> list[dict]:
        params: dict[str, Any] = {"limit": limit}
        if since is not None:
            params["since"] = since
        return self._call("GET", "/audit", params=params)

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._response(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return self._json(response)

    def _response(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response: Any = self.controllers.call(lambda url: self._send(url, method, path, kwargs))
        except NoLeader as exc:
            only_refused = len(self.urls) == 1 and exc.waited_s is None
            raise ControllerUnreachable(", ".join(self.urls), None if only_refused else exc.reason) from None
        if response.status_code >= 400:
            raise ClientError(error_message(response.status_code, response.text), response.status_code,
                              _detail(response.text))
        return response

    def _send(self, url: str, method: str, path: str, kwargs: dict[str, Any]) -> Any:
        """One request to one controller. NotSent or NotLeader when it cannot have been acted on (another
        controller may be asked); ClientError for a failure once it was sent (it is never sent again)."""
        import httpx

        try:
            response, waited_s = self._request_within_rate_limit(method, url + API_PREFIX + path, **kwargs)
        except httpx.ConnectError as exc:
            tls = self._tls_refusal(url, exc)
            if tls is not None:
                raise tls from None
            raise NotSent(url, _connect_reason(exc)) from None
        except httpx.ConnectTimeout:
            raise NotSent(url, "timed out connecting") from None
        except httpx.RemoteProtocolError as exc:
            hint = "" if url.startswith("https:") else "; if it serves HTTPS, use an https:// URL"
            raise ClientError(f"the controller at {url} closed the connection without an answer "
                              f"({exc}){hint}") from None
        except httpx.TimeoutException:
            waited = kwargs.get("timeout", self.timeout_s)
            raise ClientError(f"the controller at {url} did not answer within {waited:g} s") from None
        except httpx.HTTPError as exc:
            raise ClientError(f"request to the controller at {url} failed: {exc}") from None
        if response.status_code == NOT_LEADER_STATUS:
            raise NotLeader(url, response.headers.get(LEADER_HEADER) or _leader_in(response.text),
                            _detail(response.text))
        if response.status_code == RATE_LIMITED:
            raise ClientError(f"{error_message(response.status_code, response.text)} (gave up after "
                              f"{RATE_LIMIT_RETRIES + 1} tries over {waited_s:.0f} s)", response.status_code)
        return response

    def _request_within_rate_limit(self, method: str, url: str, **kwargs: Any) -> tuple[Any, float]:
        """The response, and the seconds slept while the controller said the user was over the rate limit."""
        import time

        waited_s = 0.0
        for retry in range(1, RATE_LIMIT_RETRIES + 1):
            response = self._http.request(method, url, **kwargs)
            if response.status_code != RATE_LIMITED:
                return response, waited_s
            wait_s = retry_wait_s(response.headers.get("Retry-After"), retry)
            time.sleep(wait_s)
            waited_s += wait_s
        return self._http.request(method, url, **kwargs), waited_s

    def _tls_refusal(self, url: str, exc: Exception) -> TlsRefused | None:
        if url.startswith("https:"):
            from corral.tls_client import tls_failure

            message = tls_failure(exc, url, self.ca_file)
            if message:
                return TlsRefused(message)
        return None

    def _json(self, response: Any) -> Any:
        try:
            return response.json()
        except ValueError:
            raise ClientError(f"the controller at {self.url} sent a reply that is not JSON") from None


def retry_wait_s(retry_after: str | None, retry: int) -> float:
    """How long to sleep before the `retry`-th retry of a rate-limited request."""
    asked = float(retry_after) if retry_after and retry_after.strip().isdigit() else 0.0
    return min(max(asked, float(retry)), RATE_LIMIT_MAX_WAIT_S)


def error_message(status: int, body: str) -> str:
    """The server's `detail`, readable: FastAPI's validation errors are a list of {loc, msg}."""
    detail = _detail(body) or f"HTTP {status}"
    if status == 401:  # no credential, or one the controller does not take: say where one comes from
        return (f"the controller refused the request ({detail}); check the credential: CORRAL_TOKEN, "
                "the cluster secret (CORRAL_SECRET, CORRAL_SECRET_FILE), or the cluster.json that 'corral up' writes")
    if status == 403:  # a valid credential whose user may not do this: no credential would help
        return f"the controller refused the request ({detail})"
    return detail


def _detail(body: str) -> str:
    import json

    try:
        detail = json.loads(body).get("detail")
    except (ValueError, AttributeError):
        return body.strip()[:300]
    if isinstance(detail, list):
        return "; ".join(_validation_item(item) for item in detail)
    return str(detail) if detail is not None else body.strip()[:300]


def _leader_in(body: str) -> str | None:
    """The `leader` of a 421's JSON body, where the header did not come through."""
    import json

    try:
        leader = json.loads(body).get("leader")
    except (ValueError, AttributeError):
        return None
    return leader if isinstance(leader, str) and leader else None


def _connect_reason(exc: Exception) -> str:
    cause = exc.__context__ or exc.__cause__
    while cause is not None and not isinstance(cause, OSError):
        cause = cause.__context__ or cause.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror
    return str(exc) or "cannot connect"


def _validation_item(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
    return f"{where}: {item.get('msg', '')}" if where else str(item.get("msg", item))


def _service_path(name: str) -> str:
    from urllib.parse import quote

    return f"/services/{quote(name, safe='')}"


def _csv(items: Iterable[object]) -> str | None:
    text = ",".join(str(i) for i in items)
    return text or None


def _epoch(when: float | None) -> str | None:
    return None if when is None else f"{when:.0f}"


def _params(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}
