"""HTTP routes: the user API and the agent API, each behind its own credentials (controller.guard)."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

from fastapi import BackgroundTasks, Depends, FastAPI, Header, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi_offline import FastAPIOffline
from prometheus_client.exposition import choose_encoder

from corral.api.schemas import (
    ErrorOut,
    JobOut,
    JobSubmit,
    JobUpdate,
    NodeOut,
    NodeUpdate,
    PartitionOut,
    SubmitReply,
)
from corral.api.services import ServiceSpec
from corral.api.services import error_lines as service_error_lines
from corral.controller import credentials as cred
from corral.controller import identity_rules, listing, param_memo, projection
from corral.controller.auth import Authenticator, AuthSettings, Principal
from corral.controller.auth_routes import auth_routes
from corral.controller.auth_socket import close_auth_socket, serve_auth_socket
from corral.controller.body_gate import BodyGate, HttpSettings
from corral.controller.dashboard_routes import dashboard_routes
from corral.controller.guard import Guard
from corral.controller.join_routes import join_routes
from corral.controller.leadership import NotLeader
from corral.controller.listing import JobFilter, JobQuery
from corral.controller.metrics import RequestTiming
from corral.controller.notebook_routes import notebook_routes
from corral.controller.params import (
    AfterQuery,
    ColumnsQuery,
    EpochQuery,
    FieldsQuery,
    JobIdPath,
    LimitQuery,
    NamePath,
    NameQuery,
    SeqQuery,
    UidQuery,
)
from corral.controller.ratelimit import RateLimiter, RateLimitSettings
from corral.controller.route_order import hot_routes_first
from corral.controller.service import ControllerService, StaleAgent
from corral.controller.service_routes import SERVICES, service_routes
from corral.controller.step_routes import step_routes
from corral.controller.stop_routes import stop_routes
from corral.controller.tenancy_routes import tenancy_routes
from corral.controller.writer import StoreUnavailable
from corral.engine.admission import AdmissionError
from corral.engine.engine import UnknownJob, WrongState
from corral.engine.records import JobState
from corral.jobref import JobIdError, parse_job_list
from corral.protocol import (
    API_PREFIX,
    EPOCH_HEADER,
    LEADER_HEADER,
    CommandBatch,
    EventBatch,
    Registration,
    RegistrationReply,
    UserCredentialReply,
    UserCredentialRequest,
)
from corral.store.auth_store import AuthStore

IDS_HELP = ("Comma-separated job ids in Slurm's forms: N (for an array's id, every task), N_I (task I of "
            "array N), N_[I-J,K] (those tasks).")

R = TypeVar("R")

ERRORS: dict[int | str, dict[str, Any]] = {status: {"model": ErrorOut} for status in (401, 403, 404, 409, 422)}
# Requests that change something are refused while the database cannot be written.
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorOut, "description": "the database cannot be written: nothing was changed"}}
WRITE_ERRORS: dict[int | str, dict[str, Any]] = {**ERRORS, **UNAVAILABLE}
# What a 503 tells clients to wait before trying again (the controller checks the store more often).
RETRY_AFTER_S = 5
# Every refusal (bad JSON, a value out of range, an unknown job, a wrong secret) has this body.
REFUSALS: dict[int | str, dict[str, Any]] = {"4XX": {"model": ErrorOut, "description": "Refused: `detail` says why"}}
# What a standby answers besides 421 (health checks, and who leads).
HEALTH_PATHS = (f"{API_PREFIX}/health", "/health", "/readyz")
STATUS_PATH = f"{API_PREFIX}/status"
# The requests that come most (sbatch, squeue, the agents' events and polls): tried first where that cannot
# change which route answers (route_order.py).
HOT_ROUTES = (("POST", f"{API_PREFIX}/jobs"), ("GET", f"{API_PREFIX}/jobs"),
              ("POST", f"{API_PREFIX}/agents/{{node}}/events"), ("GET", f"{API_PREFIX}/agents/{{node}}/commands"))


def create_app(service: ControllerService, secret: str, auth: AuthSettings | None = None,
               ratelimit: RateLimitSettings | None = None, http: HttpSettings | None = None,
               cluster_id: str | None = None, gateway_url: str | None = None) -> FastAPI:
    """`secret` is the cluster secret (the service credential); `auth` the config's [auth] section,
    `ratelimit` its [ratelimit] section, `http` its [http] section (body caps and timeouts); `cluster_id` the
    cluster's id on its hosts (/health says it); `gateway_url` the services' gateway as browsers reach it
    ([gateway] url: /health says it, null where none is configured)."""
    param_memo.install()
    settings = auth or AuthSettings()
    authenticator = Authenticator(secret, settings, AuthStore(service.store.engine), service.find_job,
                                  service.clock)
    limiter = RateLimiter(ratelimit) if ratelimit is not None and ratelimit.enabled else None
    guard = Guard(authenticator, lambda: service.engine.tenancy.spec, limiter)
    service.job_credential = authenticator.job_credential

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await service.start()
        socket_path = settings.socket
        socket_server = await serve_auth_socket(socket_path, authenticator) if socket_path else None
        yield
        if socket_server is not None and socket_path:
            close_auth_socket(socket_server, socket_path)
        await authenticator.flush_audit()
        await service.stop()

    # /docs and /redoc with their scripts and styles served from the package, not a CDN: they work on a
    # cluster without internet access. Swagger UI's "Authorize" takes a credential (guard.bearer).
    app = FastAPIOffline(title="corral", version="0.1.0", lifespan=lifespan, responses=REFUSALS,
                         description="GPU cluster workload manager: jobs, nodes, partitions and accounting.")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": "; ".join(_problems(_req.url.path, exc))}, status_code=422)

    @app.exception_handler(StaleAgent)
    async def _stale(_req: Request, exc: StaleAgent) -> JSONResponse:
        return JSONResponse({"detail": f"node {exc} must register again"}, status_code=409)

    @app.exception_handler(StoreUnavailable)
    async def _unavailable(_req: Request, exc: StoreUnavailable) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    @app.exception_handler(NotLeader)
    async def _not_leader(_req: Request, exc: NotLeader) -> JSONResponse:
        return not_leader_response(exc)

    app.add_middleware(StandbyRefusal, service=service)
    # Outside the standby's refusal, so that a refusal that leaves a body unread closes the connection.
    app.add_middleware(BodyGate, authenticator=authenticator, settings=http or HttpSettings(),
                       ready=lambda: service.ready, rate_refusal=guard.rate_refusal)
    app.add_middleware(RequestTiming, metrics=service.metrics)  # outermost: it times refusals too

    async def health() -> JSONResponse:
        """200 while the controller can take changes, or is a healthy standby; 503, with the reason, while
        its database cannot be written (requests that change something are refused then; reads still
        work) or it is taking over as the leader. `cycles`: the scheduling cycles run since start, `cycle_s`:
        the seconds they took in all (as sdiag's). `created_at`: when the cluster began (its database was
        created; null if unknown): reports over a period count no time before it. `launch_parameters`: the
        config's (Slurm's LaunchParameters that the commands obey, such as salloc's use_interactive_step).
        `gateway_url`: the services' gateway as users' browsers reach it (null: none configured), from
        which the dashboard and `corral notebook` build their links."""
        body = {"status": "ok", "cluster": service.config.cluster_name, "role": service.role,
                "cycles": service.cycles, "cycle_s": round(service.cycle_s, 6), "created_at": service.created_at(),
                "launch_parameters": list(service.config.launch_parameters), "gateway_url": gateway_url,
                **({"cluster_id": cluster_id} if cluster_id else {})}
        problem = service.health()
        if problem is None:
            return JSONResponse(body)
        return JSONResponse({**body, "status": "unavailable", "detail": problem}, status_code=503)

    for path in HEALTH_PATHS:
        app.add_api_route(path, health, methods=["GET"], responses=UNAVAILABLE)

    @app.get(STATUS_PATH, dependencies=[Depends(guard.principal)], responses=ERRORS)
    async def status() -> dict:
        """Who leads: this controller's `role` ("leader" or "standby"), lease `epoch`, `pid` and `url`, the
        `leader`'s URL (null while none is known), and every controller sharing the database, as the
        lease and their last word say (`controllers`: url, role, epoch, pid, last_seen)."""
        return await service.status()

    dashboard_routes(app, service, guard, lambda: _index(service))
    _metrics_route(app, service, guard, settings.public_metrics)
    _user_routes(app, service, guard)
    tenancy_routes(app, service, guard)
    service_routes(app, service, guard)
    notebook_routes(app, guard)
    step_routes(app, service, guard)
    stop_routes(app, service, guard)
    auth_routes(app, guard)
    join_routes(app, guard, lambda node: node in service.engine.nodes)
    _agent_routes(app, service, guard)
    hot_routes_first(app.router.routes, HOT_ROUTES, app)
    return app


def _problems(path: str, exc: RequestValidationError) -> list[str]:
    """One readable sentence per problem, instead of pydantic's nested structure."""
    if path.startswith(SERVICES):
        # A service's spec names its fields as its TOML file does: ports[1].port.
        return service_error_lines(exc.errors(), ServiceSpec if path == SERVICES else None, skip=1)
    problems = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"][1:])
        message = error["msg"].removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return problems


class StandbyRefusal:
    """A controller without an engine (a standby, or one taking over) answers only health checks and
    status: every other API request gets 421 and the leader's URL, or 503 while it cannot reach the
    database or rebuilds its engine. (Plain ASGI: it costs a request next to nothing.)"""

    def __init__(self, app, service: ControllerService) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and not self.service.ready:
            path = scope["path"]
            refusal = self.service.refusal()
            if path.startswith(API_PREFIX) and path not in HEALTH_PATHS and path != STATUS_PATH and refusal:
                if isinstance(refusal, NotLeader):
                    response = not_leader_response(refusal)
                else:
                    response = JSONResponse({"detail": str(refusal)}, status_code=503,
                                            headers={"Retry-After": str(RETRY_AFTER_S)})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def not_leader_response(exc: NotLeader) -> JSONResponse:
    headers = {LEADER_HEADER: exc.leader_url} if exc.leader_url else None
    return JSONResponse({"detail": str(exc), "leader": exc.leader_url}, status_code=421, headers=headers)


def _index(service: ControllerService) -> dict:
    """What `/` answers to clients that do not ask for HTML (browsers get the dashboard)."""
    return {"name": "corral", "cluster": service.config.cluster_name, "role": service.role,
            "links": {"dashboard": "/", "api": API_PREFIX, "docs": "/docs", "redoc": "/redoc",
                      "openapi": "/openapi.json", "metrics": "/metrics", "health": "/health", "status": STATUS_PATH}}


def _metrics_route(app: FastAPI, service: ControllerService, guard: Guard, public: bool) -> None:
    """GET /metrics for Prometheus (docs/metrics.md). A standby answers too: its role and no job gauges."""
    registry = service.metrics.registry
    auth = [] if public else [Depends(guard.principal)]

    @app.get("/metrics", dependencies=auth, responses=ERRORS, response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics (text format, or OpenMetrics when the scraper asks for it): jobs by state,
        GPUs, quota, fair share, cycle times, API latency. Any valid credential may read them (a token
        from `corral token create`), or none with `[auth] public_metrics = true`."""
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        # On the event loop, as every read: one consistent picture of the engine.
        return Response(encoder(registry), media_type=content_type)


def _user_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:  # noqa: C901 (a table of small handlers)
    auth = Depends(guard.user)
    user_dep = Depends(guard.user)
    # Job lists are built a few at a time: built side by side (each yields between slices), a thousand
    # `squeue -r` over 8,000 tasks held 4.8 GiB of half-encoded answers (bench/polling_load.py).
    list_slots = asyncio.Semaphore(listing.LISTS_AT_ONCE)

    async def job_action(principal: Principal, job_id: int, action: str) -> None:
        await guard.job_action(principal, service.find_job(job_id), action, job_id)

    @app.post(f"{API_PREFIX}/jobs", status_code=201, responses=WRITE_ERRORS)
    async def submit(body: JobSubmit, principal: Principal = user_dep) -> SubmitReply:
        """The job belongs to the caller: `user` must be the caller's name (admins may name anyone), and
        `uid` is the caller's, whatever the body says."""
        body = await _submission(guard, principal, body)
        try:
            job_id, task_ids = await service.submit(body)
        except AdmissionError as exc:
            raise HTTPException(422, str(exc)) from None
        await guard.allow(principal, "submit", f"job {job_id}", f"user {body.user}, account {body.account or '-'}")
        return SubmitReply(job_id=job_id, task_ids=task_ids)

    @app.get(f"{API_PREFIX}/jobs", response_model=list[JobOut], responses=ERRORS)
    async def list_jobs(states: NameQuery = None, user: NameQuery = None, all: bool = False,
                        ids: str | None = Query(None, description=IDS_HELP), partitions: NameQuery = None,
                        accounts: NameQuery = None, after: AfterQuery = None, limit: LimitQuery = None,
                        combine_arrays: bool = False, fields: FieldsQuery = None, columns: ColumnsQuery = False,
                        principal: Principal = user_dep) -> Response:
        """Unfinished jobs (with `all`, finished ones too), by id. Every filter takes a comma-separated
        list: `user` names, `ids`, `states`, `partitions`, `accounts`. Paging: at most `limit` jobs with
        an id above `after`; the X-Next-After header says where the next page starts. `combine_arrays`:
        an array's pending tasks as one record (`array_task_spec`), as squeue shows them. `fields`: each
        job as an array of those JobOut fields' values, in that order; with `columns` too, an object
        `{"columns": [...]}` holding a list per field of every job's value, in the jobs' order."""
        query = JobQuery(JobFilter(states=_states(states), users=_names(user), ids=_job_ids(service, ids),
                                   partitions=_names(partitions), accounts=_names(accounts)),
                         after=after, limit=limit, combine_arrays=combine_arrays, fields=_fields(fields),
                         columns=_columns(columns, fields))
        async with list_slots:
            if all:
                found = await listing.stored_jobs(service.engine, service.store, query, service.clock(),
                                                  queue_facts=True, live=service.live_usage,
                                                  forecasts=service.forecasts.starts,
                                                  window=service.forecasts.window)
            else:
                found = await listing.active_jobs(service.engine, query, service.clock(), service.live_usage,
                                                  service.forecasts.starts, service.forecasts.window)
        guard.charge(principal, found.jobs)
        return _json_list(found)

    @app.get(f"{API_PREFIX}/jobs/{{job_id}}", dependencies=[auth], responses=ERRORS)
    async def get_job(job_id: JobIdPath) -> JobOut:
        job = service.job(job_id)
        if job is None:
            raise HTTPException(404, f"invalid job id specified: {job_id}")
        return job

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/cancel", responses=WRITE_ERRORS)
    async def cancel(job_id: JobIdPath, uid: UidQuery = None, principal: Principal = user_dep) -> JobOut:
        """Cancel at any state; the caller's uid shows in sacct as `CANCELLED by <uid>` (an admin may
        name another `uid`)."""
        await job_action(principal, job_id, "cancel")
        return await _operate(service, job_id, service.cancel(job_id, _acting_uid(principal, uid)))

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/signal", responses=WRITE_ERRORS)
    async def signal_job(job_id: JobIdPath, signal: int = Query(..., ge=1, le=64),
                         scope: Literal["steps", "batch", "full"] = "steps", uid: UidQuery = None,
                         principal: Principal = user_dep) -> JobOut:
        """Send a signal to a running job without ending it (scancel --signal, -b, -f)."""
        await job_action(principal, job_id, f"signal {signal}")
        return await _operate(service, job_id, service.signal(job_id, signal, scope, _acting_uid(principal, uid)))

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/requeue", responses=WRITE_ERRORS)
    async def requeue(job_id: JobIdPath, background: BackgroundTasks, principal: Principal = user_dep) -> JobOut:
        await job_action(principal, job_id, "requeue")
        out, send_kills = await _operate(service, job_id, service.requeue(job_id))
        background.add_task(send_kills)  # after the reply: the caller is often one of the job's processes
        return out

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/update", responses=WRITE_ERRORS)
    async def update(job_id: JobIdPath, body: JobUpdate, principal: Principal = user_dep) -> JobOut:
        await job_action(principal, job_id, "update")
        await _check_update(guard, principal, service.find_job(job_id), body)
        return await _operate(service, job_id, service.update(job_id, body))

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/hold", responses=WRITE_ERRORS)
    async def hold(job_id: JobIdPath, principal: Principal = user_dep) -> JobOut:
        await job_action(principal, job_id, "hold")
        return await _operate(service, job_id, service.hold(job_id, True))

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/release", responses=WRITE_ERRORS)
    async def release(job_id: JobIdPath, principal: Principal = user_dep) -> JobOut:
        await job_action(principal, job_id, "release")
        return await _operate(service, job_id, service.hold(job_id, False))

    @app.get(f"{API_PREFIX}/nodes", dependencies=[auth])
    async def nodes() -> list[NodeOut]:
        return service.nodes()

    @app.post(f"{API_PREFIX}/nodes/{{name}}", responses=WRITE_ERRORS)
    async def update_node(name: NamePath, body: NodeUpdate, principal: Principal = user_dep) -> NodeOut:
        await guard.require(principal, "operator", "drain" if body.drain else "resume", f"node {name}")
        try:
            await service.drain(name, body.drain, body.reason)
        except KeyError:
            raise HTTPException(404, f"unknown node {name!r}") from None
        return next(n for n in service.nodes() if n.name == name)

    @app.get(f"{API_PREFIX}/partitions", dependencies=[auth])
    async def partitions() -> list[PartitionOut]:
        return service.partitions()

    @app.get(f"{API_PREFIX}/accounting", response_model=list[JobOut], responses=ERRORS)
    async def accounting(user: NameQuery = None, states: NameQuery = None, since: EpochQuery = None,
                         until: EpochQuery = None, ids: str | None = Query(None, description=IDS_HELP),
                         partitions: NameQuery = None, accounts: NameQuery = None, after: AfterQuery = None,
                         limit: LimitQuery = None, combine_arrays: bool = False, fields: FieldsQuery = None,
                         columns: ColumnsQuery = False, principal: Principal = user_dep) -> Response:
        """Every job that existed between `since` (not ended by then) and `until` (submitted by then),
        by id, read from the database. Filters, paging, `combine_arrays`, `fields` and `columns` as for
        GET /jobs."""
        query = JobQuery(JobFilter(states=_states(states), users=_names(user), ids=_job_ids(service, ids),
                                   partitions=_names(partitions), accounts=_names(accounts)),
                         since=since, until=until, after=after, limit=limit, combine_arrays=combine_arrays,
                         fields=_fields(fields), columns=_columns(columns, fields))
        async with list_slots:
            found = await listing.stored_jobs(service.engine, service.store, query, service.clock())
        guard.charge(principal, found.jobs)
        return _json_list(found)


async def _submission(guard: Guard, principal: Principal, body: JobSubmit) -> JobSubmit:
    """The body as the caller may submit it: their own name and uid (admins: as written, if this host's
    user database agrees; for another user without a uid, that user's uid on this host when it has one).
    A job as root only from root on this host (identity_rules.root_refusal)."""
    written_uid = body.uid if principal.admin and "uid" in body.model_fields_set else None
    refusal = identity_rules.root_refusal("a job", body.user, written_uid, principal.is_root_on_controller_host)
    if refusal:
        await guard.deny(principal, "submit", f"user {body.user}", refusal)
    if principal.admin:
        if "uid" in body.model_fields_set:
            conflict = identity_rules.owner_conflict(body.user, body.uid)
            if conflict:
                await guard.authn.audit(principal, "submit", f"user {body.user}", "denied", conflict)
                raise HTTPException(422, f"user and uid disagree: {conflict}")
            return body
        uid = principal.uid if body.user == principal.name else identity_rules.host_uid(body.user)
        return body if uid is None else body.model_copy(update={"uid": uid})
    if body.user != principal.name:
        await guard.deny(principal, "submit", f"user {body.user}",
                         f"{principal.name} cannot submit a job as {body.user} (only an admin can)")
    if body.priority and not principal.operator:
        await guard.deny(principal, "submit", f"user {body.user}", "only an operator or admin can set a priority")
    return body.model_copy(update={"uid": principal.uid})


async def _check_update(guard: Guard, principal: Principal, job, body: JobUpdate) -> None:
    """As Slurm: a user may lower a time limit but not raise it, nor set a priority."""
    if principal.operator or job is None:
        return
    target = f"job {job.id}"
    if body.priority is not None:
        await guard.deny(principal, "update", target, "only an operator or admin can set a priority")
    if body.time_limit_s is not None and body.time_limit_s > job.spec.request.time_limit_s:
        await guard.deny(principal, "update", target, "only an operator or admin can raise a time limit")


def _acting_uid(principal: Principal, asked: int | None) -> int | None:
    """Who acts, as recorded (CANCELLED by <uid>): the caller's uid; an admin may name another."""
    return asked if principal.admin and asked is not None else principal.uid


async def _operate(service: ControllerService, job_id: int, operation: Awaitable[R]) -> R:
    try:
        return await operation
    except UnknownJob:
        found = service.find_job(job_id)
        if found is None:
            raise HTTPException(404, f"invalid job id specified: {job_id}") from None
        raise HTTPException(409, f"job {job_id} already finished ({found.state.value})") from None
    except WrongState as exc:
        raise HTTPException(409, str(exc)) from None


def _job_ids(service: ControllerService, text: str | None) -> frozenset[int] | None:
    """The raw ids an `ids=` list names; ids that name no job add nothing (as sacct -j)."""
    if not text:
        return None
    try:
        refs = parse_job_list(text, task_lists=True)
    except JobIdError as exc:
        raise HTTPException(422, f"ids: {exc}") from None
    return frozenset(service.job_ids(refs))


def _states(text: str | None) -> frozenset[str] | None:
    if not text:
        return None
    wanted = frozenset(s.strip().upper() for s in text.split(",") if s.strip())
    unknown = wanted - {s.value for s in JobState}
    if unknown:
        raise HTTPException(422, f"unknown job state(s): {', '.join(sorted(unknown))}")
    return wanted


def _names(text: str | None) -> frozenset[str] | None:
    """A comma-separated filter; none given (or only commas) keeps everything."""
    names = frozenset(part.strip() for part in (text or "").split(",") if part.strip())
    return names or None


def _fields(text: str | None) -> tuple[str, ...] | None:
    try:
        return projection.parse_fields(text)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None


def _columns(columns: bool, fields: str | None) -> bool:
    if columns and fields is None:
        raise HTTPException(422, "columns needs fields: name the fields each column holds")
    return columns


def _json_list(found: listing.JobList) -> Response:
    headers = {listing.NEXT_PAGE_HEADER: str(found.next_after)} if found.next_after is not None else None
    return Response(found.body, media_type="application/json", headers=headers)


def _agent_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:
    agent_dep = Depends(guard.agent)

    @app.post(f"{API_PREFIX}/agents/register", responses=UNAVAILABLE)
    async def register(body: Registration, principal: Principal = agent_dep) -> RegistrationReply:
        if principal.kind == "agent" and body.node != principal.name:
            await guard.deny(principal, "register", f"node {body.node}",
                             f"the agent credential of node {principal.name} cannot register node {body.node}")
        return await service.register(body)

    @app.get(f"{API_PREFIX}/agents/{{node}}/commands")
    async def commands(node: NamePath, after: SeqQuery = 0,
                       wait_s: float = Query(20.0, ge=0, le=60),
                       epoch: str | None = Header(None, alias=EPOCH_HEADER),
                       _principal: Principal = agent_dep) -> CommandBatch:
        service.check_agent(node, epoch)
        commands = await service.agent_commands(node, after, wait_s)
        return CommandBatch(commands=commands, leader_epoch=service.leader_epoch)

    @app.post(f"{API_PREFIX}/agents/{{node}}/events", responses=UNAVAILABLE)
    async def events(node: NamePath, body: EventBatch,
                     epoch: str | None = Header(None, alias=EPOCH_HEADER),
                     _principal: Principal = agent_dep) -> dict:
        await service.agent_events(node, epoch, body)
        return {"accepted": len(body.events)}

    @app.post(f"{API_PREFIX}/agents/{{node}}/user-credentials")
    async def user_credential(node: NamePath, body: UserCredentialRequest,
                              principal: Principal = agent_dep) -> UserCredentialReply:
        """A user credential for a local user of the node, whom its agent's auth socket found with
        SO_PEERCRED: the controller takes the agent's word for an ordinary user whose name and uid agree
        with its own host's (never root, nor a system account: identity_rules.vouch_refusal), audited."""
        action, target = "issue user credential", f"user {body.user} (uid {body.uid})"
        refusal = guard.authn.vouch_refusal(body.user, body.uid)
        if refusal:
            await guard.deny(principal, action, target, refusal)
        authn, via = guard.authn, f"vouched by agent {node}"
        await guard.allow(Principal("user", body.user, body.uid, via), action, target, via)
        return UserCredentialReply(credential=cred.issue_user(
            authn.key, body.user, body.uid, body.gid, authn.clock(), authn.settings.credential_ttl_s, node))
