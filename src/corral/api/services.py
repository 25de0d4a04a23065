"""A service as a user declares it (docs/services.md): the body of `POST /api/v1/services` and the model a
service's TOML file (`corral service apply -f svc.toml`) is read into.

Every field is bounded as every other body (`api/fields.py`), unknown fields are refused naming them, and
the checks that need two fields (a probe naming an undeclared port, replicas outside the autoscaler's
range, ...) name the field they refuse. `problems(error)` turns a ValidationError into one line per
problem, `ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)`, the form the
REST API, the CLI and the TOML loader all print."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from corral import limits
from corral.api.fields import (
    Amount,
    Args,
    Comment,
    Count,
    DurationS,
    Env,
    FilePath,
    MemMib,
    Name,
    Script,
    TimeLimitS,
    WorkDir,
)
from corral.container_options import ContainerOptionError, parse_mounts

# A service's name is part of URLs (`/s/<name>/` on the gateway) and of DNS-style names: a DNS label.
SERVICE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
# A port's name becomes CORRAL_PORT_<NAME> in the replica's environment: a variable name once upper-cased.
PORT_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,31}$"
PORTS_MAX = 64
# Each replica is a job: one apply may not ask for more jobs than one array submission may make.
REPLICAS_MAX = limits.MAX_ARRAY_SIZE - 1

ServiceName = Annotated[str, Field(pattern=SERVICE_NAME_PATTERN, max_length=63, description=(
    "A DNS label: lower-case letters, digits and '-', at most 63 characters, starting and ending with a "
    "letter or digit"))]
PortName = Annotated[str, Field(pattern=PORT_NAME_PATTERN, description=(
    "Lower-case letters, digits and '_', starting with a letter (it becomes CORRAL_PORT_<NAME>)"))]
Replicas = Annotated[int, Field(ge=0, le=REPLICAS_MAX)]
PeriodS = Annotated[float, Field(gt=0, le=limits.DURATION_S_MAX, allow_inf_nan=False)]
Threshold = Annotated[int, Field(ge=1, le=1000)]


def field_problem(field: str, message: str) -> PydanticCustomError:
    """A check of several fields that names the one it refuses (relative to the model that checks)."""
    return PydanticCustomError("field_problem", "{field}: {message}", {"field": field, "message": message})


class Strict(BaseModel):
    # Frozen: the engine keeps specs on its records and compares them (a changed spec is a new revision).
    model_config = ConfigDict(extra="forbid", frozen=True)


class PortSpec(Strict):
    name: PortName
    port: int = Field(0, description="0: any free port on the replica's node (the default); else that port")

    @field_validator("port")
    @classmethod
    def _a_port(cls, port: int) -> int:
        if not 0 <= port <= 65535:
            raise ValueError(f"{port} is not a port (1-65535, or 0: any free port on the node)")
        return port


class HttpCheck(Strict):
    path: str = Field("/", max_length=limits.PATH_MAX_CHARS, pattern=r"^/[\x21-\x7e]*$",
                      description="The path to GET, from '/' (printable ASCII, no spaces); 2xx and 3xx pass")
    port: PortName = Field(description="The name of one of the service's ports")


class TcpCheck(Strict):
    port: PortName = Field(description="The name of one of the service's ports")


class ExecCheck(Strict):
    command: Args = Field(min_length=1, description="Run on the replica's node as the service's user; exit 0 "
                                                    "passes")


class ProbeSpec(Strict):
    """Exactly one of `http`, `tcp` or `exec`, and when and how often (Kubernetes' probe fields)."""

    http: HttpCheck | None = None
    tcp: TcpCheck | None = None
    exec: ExecCheck | None = None
    initial_delay_s: DurationS = 0.0
    period_s: PeriodS = 10.0
    timeout_s: PeriodS = 1.0
    success_threshold: Threshold = 1
    failure_threshold: Threshold = 3

    @model_validator(mode="after")
    def _one_check(self) -> Self:
        given = [kind for kind in ("http", "tcp", "exec") if getattr(self, kind) is not None]
        if len(given) != 1:
            said = f"{' and '.join(given)} are given" if given else "none is given"
            raise ValueError(f"a probe needs exactly one of http, tcp or exec: {said}")
        return self

    @property
    def port(self) -> str | None:
        """The port name the probe checks (None for exec)."""
        check = self.http or self.tcp
        return check.port if check is not None else None


class Probes(Strict):
    startup: ProbeSpec | None = Field(None, description="Until it passes, the other probes wait and a slow start is "
                                                    "not killed; failing failure_threshold times restarts")
    readiness: ProbeSpec | None = Field(None, description="Gates traffic: the gateway routes only to ready replicas "
                                                      "(none: ready once started)")
    liveness: ProbeSpec | None = Field(None, description="failure_threshold failures in a row restart the replica")

    @model_validator(mode="after")
    def _one_success_restarts(self) -> Self:
        for kind in ("startup", "liveness"):
            probe = getattr(self, kind)
            if probe is not None and probe.success_threshold != 1:
                raise field_problem(f"{kind}.success_threshold", f"must be 1 for a {kind} probe (as in "
                                    f"Kubernetes): one success is what it waits for, not {probe.success_threshold}")
        return self

    def named(self) -> list[tuple[str, ProbeSpec]]:
        return [(kind, probe) for kind in ("startup", "readiness", "liveness")
                if (probe := getattr(self, kind)) is not None]


class RestartPolicy(Strict):
    """CrashLoopBackOff: a replica that ends or fails liveness is restarted after a delay that starts at
    `backoff_initial_s`, doubles each time up to `backoff_max_s`, and resets after `reset_after_s` healthy."""

    backoff_initial_s: PeriodS = 10.0
    backoff_max_s: PeriodS = 300.0
    reset_after_s: PeriodS = 600.0

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.backoff_initial_s > self.backoff_max_s:
            raise field_problem("backoff_initial_s", f"{self.backoff_initial_s:g} is more than backoff_max_s "
                                                     f"({self.backoff_max_s:g})")
        return self


class UpdatePolicy(Strict):
    """A rolling update: at most `max_surge` replicas above the desired count and at most `max_unavailable`
    below it at any time; new replicas not ready within `ready_timeout_s` roll the update back."""

    max_surge: Replicas = 1
    max_unavailable: Replicas = 0
    ready_timeout_s: PeriodS = 600.0

    @model_validator(mode="after")
    def _can_progress(self) -> Self:
        if self.max_surge == 0 and self.max_unavailable == 0:
            raise ValueError("max_surge and max_unavailable are both 0: an update could neither start a new "
                             "replica nor stop an old one")
        return self


class Placement(Strict):
    spread: bool = Field(False, description="Prefer nodes that run fewer of the service's replicas")
    max_per_node: Count | None = Field(None, description="At most this many replicas on one node")
    exclude: Comment | None = Field(None, description="Never on these nodes (a hostlist, as sbatch -x)")
    constraint: Comment | None = Field(None, description="Only on nodes with these features (as sbatch "
                                                          "--constraint: 'a', 'a&b' or 'a|b')")


class Autoscale(Strict):
    """desired = clamp(ceil(load / target), min_replicas, max_replicas), from the gateway's counts."""

    min_replicas: Replicas = 1
    max_replicas: Replicas
    target_inflight: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False,
                                          description="In-flight requests per replica")
    target_rps: float | None = Field(None, gt=0, le=1e9, allow_inf_nan=False,
                                     description="Requests per second per replica")
    scale_to_zero: bool = Field(False, description="After idle_s without a request, stop every replica; the "
                                                   "gateway holds the next request until one is ready")
    idle_s: PeriodS = 300.0
    # 60 s, not HPA's 300 s: our load reports come every 5 s from one gateway that counts every request (no
    # sampled CPU metric to smooth), and replicas hold GPUs that batch work is waiting for; a minute of
    # lower demand is enough to release them without flapping on a pause between request bursts.
    scale_down_window_s: float = Field(60.0, ge=0, le=limits.DURATION_S_MAX, allow_inf_nan=False,
                                       description="Scale down only after fewer replicas were wanted for this "
                                                   "long (to the most wanted in that time); up is at once")

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.target_inflight is None) == (self.target_rps is None):
            said = "both are given" if self.target_inflight is not None else "neither is given"
            raise ValueError(f"give exactly one of target_inflight or target_rps: {said}")
        if self.min_replicas > self.max_replicas:
            raise field_problem("min_replicas", f"{self.min_replicas} is more than max_replicas ({self.max_replicas})")
        if self.max_replicas == 0:
            raise field_problem("max_replicas", "must be at least 1")
        return self


class ServiceSpec(Strict):
    """A service: `replicas` copies of one command, each a job (kind "service") charged to the account and
    counted in its queue's quota like any job. `user` is the caller (an admin may name another user), as
    for jobs; the uid its replicas run as comes with the event (ServiceApplied.uid), from the credential."""

    name: ServiceName
    user: Name = Field("", description="Whose service it is; empty: the caller (only an admin may name another)")
    account: Name | None = None
    partition: Name | None = None
    qos: Name | None = None
    queue: Name | None = None
    replicas: Replicas = 1
    nodes: Count = Field(1, description="Nodes per replica (a gang when more than one)")
    gpus_per_node: Amount = 0
    cpus_per_task: Count = 1
    mem_per_node_mib: MemMib | None = None
    gpu_model: Name | None = None
    gpu_share: str | None = Field(None, pattern=r"^(shard|mps):[0-9]{1,6}$", description=(
        "A share of one GPU per node instead of whole ones ('shard:N', 'mps:P', as --gres): needs "
        "gpus_per_node = 1; bound by CUDA MPS where the node has it"))
    command: Args | None = Field(None, description="The replica's command line. Exclusive with script.")
    script: Script | None = Field(None, description="A script run as the replica. Exclusive with command.")
    env: Env = {}
    workdir: WorkDir
    image: FilePath | None = Field(None, description=(
        "Run each replica in this container image (as --container-image: a docker-archive tarball every node "
        "can read); only on nodes with the feature runc. None: on the node"))
    image_mounts: Comment = Field("", description="Paths the replica's container sees, as --container-mounts: "
                                                  "SRC[:DST[:ro|rw]][,...]")
    ports: list[PortSpec] = Field([], max_length=PORTS_MAX)
    probes: Probes = Probes()
    restart: RestartPolicy = RestartPolicy()
    update: UpdatePolicy = UpdatePolicy()
    placement: Placement = Placement()
    min_ready: Replicas = Field(0, description="Preemption never takes the service below this many ready "
                                               "replicas unless the preempting QOS may")
    time_limit_s: TimeLimitS | None = Field(None, description="Per replica; none: no limit")
    public: bool = Field(False, description="The gateway serves it without a credential")
    autoscale: Autoscale | None = None
    session: bool = Field(False, description=(
        "A notebook or dev environment (corral notebook): one replica, never restarted, that only its owner "
        "may open through the gateway; once its replica ends (time limit, idle stop, exit, cancel, "
        "preemption) the service is gone"))
    idle_timeout_s: TimeLimitS | None = Field(None, description=(
        "A session only: stop it once its Jupyter kernels have been idle this long (none busy, no activity) "
        "and its GPUs under 5% utilisation as long (docs/services.md, Notebooks); none: only its time limit"))
    keep_prefix: bool | None = Field(None, description=(
        "Whether the gateway sends the path on with its /s/<name> prefix (an application that serves under it, "
        "as JupyterLab with its base_url) or without it (one that serves at / with relative links, as Ray's "
        "dashboard). Default: with it for a session, without it otherwise"))

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        problem = (_command_problem(self) or _port_problem(self.ports) or _probe_port_problem(self)
                   or _replica_problem(self) or _session_problem(self) or _image_problem(self))
        if problem:
            raise field_problem(*problem)
        return self


def _image_problem(spec: ServiceSpec) -> tuple[str, str] | None:
    if spec.image_mounts and not spec.image:
        return "image_mounts", "mounts without an image: give image too"
    try:
        parse_mounts(spec.image_mounts)
    except ContainerOptionError as exc:
        return "image_mounts", str(exc).removeprefix("--container-mounts: ")
    return None


def _command_problem(spec: ServiceSpec) -> tuple[str, str] | None:
    if (spec.command is None) == (spec.script is None):
        said = "both are given" if spec.command is not None else "neither is given"
        return "command", f"give exactly one of command or script: {said}"
    if spec.command is not None and not spec.command:
        return "command", "an empty command runs nothing"
    return None


def _port_problem(ports: list[PortSpec]) -> tuple[str, str] | None:
    seen_names: dict[str, int] = {}
    seen_ports: dict[int, int] = {}
    for index, port in enumerate(ports):
        if port.name in seen_names:
            return f"ports[{index}].name", f"{port.name!r} is also the name of ports[{seen_names[port.name]}]"
        seen_names[port.name] = index
        if port.port and port.port in seen_ports:
            return f"ports[{index}].port", f"{port.port} is also ports[{seen_ports[port.port]}]'s"
        seen_ports[port.port] = index
    return None


def _probe_port_problem(spec: ServiceSpec) -> tuple[str, str] | None:
    declared = [port.name for port in spec.ports]
    for kind, probe in spec.probes.named():
        name = probe.port
        if name is not None and name not in declared:
            check = "http" if probe.http is not None else "tcp"
            known = f"the service's ports are {', '.join(declared)}" if declared else "the service declares no ports"
            return f"probes.{kind}.{check}.port", f"{name!r} is not one of the service's ports ({known})"
    return None


def _replica_problem(spec: ServiceSpec) -> tuple[str, str] | None:
    scale = spec.autoscale
    if scale is not None and not scale.min_replicas <= spec.replicas <= scale.max_replicas:
        return "replicas", (f"{spec.replicas} is outside autoscale's range ({scale.min_replicas} to "
                            f"{scale.max_replicas})")
    floor = scale.min_replicas if scale is not None else spec.replicas
    if spec.min_ready > floor:
        what = "autoscale.min_replicas" if scale is not None else "replicas"
        return "min_ready", f"{spec.min_ready} is more than {what} ({floor}): the service could never meet it"
    return None


def _session_problem(spec: ServiceSpec) -> tuple[str, str] | None:
    if spec.gpu_share is not None and spec.gpus_per_node != 1:
        return "gpu_share", f"a share of one GPU needs gpus_per_node = 1, not {spec.gpus_per_node}"
    if not spec.session:
        if spec.idle_timeout_s is not None:
            return "idle_timeout_s", "only a session (session = true) is stopped when idle"
        return None
    if spec.replicas != 1:
        return "replicas", f"a session has exactly one replica, not {spec.replicas}"
    if spec.autoscale is not None:
        return "autoscale", "a session is not autoscaled"
    if spec.public:
        return "public", "a session is its owner's alone: it cannot be public"
    if not spec.ports:
        return "ports", "a session needs a port for the gateway to reach it"
    return None


class ServiceScale(Strict):
    replicas: Replicas


class ServiceLoad(Strict):
    """What the gateway saw of one service (`POST /api/v1/services/{name}/load`), for the autoscaler."""

    inflight: Amount
    rps: float = Field(ge=0, le=1e9, allow_inf_nan=False)
    at: float | None = Field(None, ge=0, le=limits.TIME_MAX_S, allow_inf_nan=False, description=(
        "When it was measured (epoch seconds); none: when the controller receives it"))


class ServiceApplyReply(BaseModel):
    name: str
    outcome: Literal["created", "updated", "unchanged"]
    revision: int


class ProbeStatusOut(BaseModel):
    kind: Literal["startup", "readiness", "liveness"]
    ok: bool
    consecutive: int = 0
    detail: str = ""


class ReplicaOut(BaseModel):
    index: int
    job_id: int | None
    revision: int
    node: str  # "" while pending
    state: str  # the job's state, or "backoff" while a restart waits
    ready: bool
    restarts: int
    probes: list[ProbeStatusOut] = []
    endpoints: dict[str, str] = {}  # port name -> host:port
    reason: str = ""


class LoadOut(BaseModel):
    """The gateway's last report of the service's load."""

    inflight: float
    rps: float
    at: float


class ServiceOut(BaseModel):
    name: str
    user: str
    account: str
    revision: int
    desired_replicas: int
    ready_replicas: int
    created: float
    spec: ServiceSpec
    replicas: list[ReplicaOut] = []
    reason: str = ""  # why it has fewer replicas than desired (a refusal, quota, backoff)
    history: list[str] = []
    load: LoadOut | None = None  # none: no gateway has reported since this controller started


class EndpointOut(BaseModel):
    replica: int
    job_id: int
    node: str
    ports: dict[str, str]  # port name -> host:port, the spec's first port first (the one the gateway routes to)
    draining: bool = False  # being replaced: the gateway sends it no new request (its own finish)


class EndpointsOut(BaseModel):
    """The wire contract with the gateway (docs/decisions/0018-service-gateway.md)."""

    service: str
    version: int = Field(description="Changes whenever the set changes; pass it as ?after= to wait for a change")
    public: bool
    owner: str = Field("", description="Only this user may open it through the gateway (a session); \"\": any user")
    upstream_authorization: str = Field("", description=(
        "For the gateway only (empty to anyone else): the Authorization header a session's application "
        "expects from it"))
    keep_prefix: bool = Field(False, description="Send the path whole, /s/<name>/ included (a session's "
                                                 "JupyterLab serves under it); else without that prefix")
    endpoints: list[EndpointOut]


def location(loc: tuple[int | str, ...]) -> str:
    """A pydantic error location as a key path: ('ports', 1, 'port') -> 'ports[1].port'."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part:
            path += f".{part}" if path else str(part)
    return path


def problems(error: ValidationError, model: type[BaseModel] | None = ServiceSpec) -> list[str]:
    """One line per problem, each naming its field: `ports[1].port: 70000 is not a port (...)`."""
    return error_lines(error.errors(), model)


def error_lines(errors: Sequence[Any], model: type[BaseModel] | None, skip: int = 0) -> list[str]:
    """`problems` for pydantic's error dicts, whose locations start after `skip` parts (FastAPI's
    "body"); `model` is the body's, to list the known fields beside an unknown one."""
    lines = []
    for item in errors:
        loc = tuple(item["loc"])[skip:]
        where = location(loc)
        message = str(item["msg"]).removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = _known_fields(model, loc) if model is not None else []
            message = f"unknown field (the known ones: {', '.join(known)})" if known else "unknown field"
        elif item["type"] == "missing":
            message = "required, and missing"
        elif item["type"] == "field_problem":
            # A check of several fields named the one it refuses, relative to where it ran.
            context = item.get("ctx", {})
            inner, message = context["field"], context["message"]
            where = f"{where}.{inner}" if where else inner
        lines.append(f"{where}: {message}" if where else message)
    return lines


def _known_fields(model: type[BaseModel], loc: tuple) -> list[str]:
    """The fields of the model that holds the unknown one at `loc`."""
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        annotation = current.model_fields[str(part)].annotation if str(part) in current.model_fields else None
        current = _model_in(annotation)
    return sorted(current.model_fields) if current is not None else []


def _model_in(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


__all__ = ["Autoscale", "EndpointOut", "EndpointsOut", "ExecCheck", "HttpCheck", "LoadOut", "Placement", "PortSpec",
           "ProbeSpec", "ProbeStatusOut", "Probes", "ReplicaOut", "RestartPolicy", "ServiceApplyReply", "ServiceLoad",
           "ServiceOut", "ServiceScale", "ServiceSpec", "Strict", "TcpCheck", "UpdatePolicy", "error_lines",
           "field_problem", "location", "problems"]
