"""A service as its user declares it (docs: services-design, issue 22): a TOML file or a REST body, every
value bounded by api/fields.py and unknown fields refused naming the field.

The engine holds it in a `records.Service`; every replica is a job (`JobSpec.kind` "service")."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from corral.api.fields import Amount, Args, Count, DurationS, Env, FilePath, MemMib, Name, Script, TimeLimitS

PortNumber = Annotated[int, Field(ge=0, le=65535)]  # 0: any free port on the node, chosen at launch
Replicas = Annotated[int, Field(ge=0, le=1000)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PortSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]
    port: PortNumber = 0


class HttpCheck(Strict):
    path: Annotated[str, Field(pattern=r"^/", max_length=1024)] = "/"
    port: Name  # a port name from `ports`


class TcpCheck(Strict):
    port: Name


class ExecCheck(Strict):
    command: Args


class ProbeSpec(Strict):
    http: HttpCheck | None = None
    tcp: TcpCheck | None = None
    exec: ExecCheck | None = None
    initial_delay_s: DurationS = 0.0
    period_s: Annotated[float, Field(gt=0, le=86_400)] = 10.0
    timeout_s: Annotated[float, Field(gt=0, le=3_600)] = 1.0
    success_threshold: Annotated[int, Field(ge=1, le=100)] = 1
    failure_threshold: Annotated[int, Field(ge=1, le=100)] = 3

    @model_validator(mode="after")
    def _one_check(self) -> ProbeSpec:
        given = [k for k in ("http", "tcp", "exec") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"a probe has exactly one of http, tcp or exec (given: {', '.join(given) or 'none'})")
        return self


class Probes(Strict):
    startup: ProbeSpec | None = None
    readiness: ProbeSpec | None = None
    liveness: ProbeSpec | None = None


class RestartPolicy(Strict):
    """Kubernetes' CrashLoopBackOff: 10 s, doubling, at most 5 min; reset after 10 min of healthy running."""

    backoff_initial_s: Annotated[float, Field(ge=0, le=86_400)] = 10.0
    backoff_max_s: Annotated[float, Field(ge=0, le=86_400)] = 300.0
    reset_after_s: Annotated[float, Field(ge=0, le=86_400 * 7)] = 600.0


class UpdatePolicy(Strict):
    max_surge: Annotated[int, Field(ge=0, le=1000)] = 1
    max_unavailable: Annotated[int, Field(ge=0, le=1000)] = 0
    ready_timeout_s: Annotated[float, Field(gt=0, le=86_400)] = 600.0


class Placement(Strict):
    spread: bool = False
    max_per_node: Count | None = None


class Autoscale(Strict):
    min_replicas: Replicas = 1
    max_replicas: Replicas = 1
    target_inflight: Annotated[float, Field(gt=0, le=1e6)] | None = None
    target_rps: Annotated[float, Field(gt=0, le=1e9)] | None = None
    scale_to_zero: bool = False
    idle_s: Annotated[float, Field(gt=0, le=86_400 * 7)] = 300.0


class ServiceSpec(Strict):
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9-]{0,62}$")]
    user: Name = ""  # the caller (the controller sets it)
    account: Name | None = None
    partition: Name | None = None
    qos: Name | None = None
    queue: Name | None = None
    replicas: Replicas = 1
    nodes: Count = 1
    gpus_per_node: Amount = 0
    cpus_per_task: Count = 1
    mem_per_node_mib: MemMib | None = None
    gpu_model: Name | None = None
    command: Args | None = None
    script: Script | None = None
    env: Env = Field(default_factory=dict)
    workdir: FilePath = "/"
    ports: Annotated[list[PortSpec], Field(max_length=16)] = Field(default_factory=list)
    probes: Probes = Field(default_factory=Probes)
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    update: UpdatePolicy = Field(default_factory=UpdatePolicy)
    placement: Placement = Field(default_factory=Placement)
    min_ready: Replicas = 0
    time_limit_s: TimeLimitS | None = None  # None: no limit but the partition's
    public: bool = False
    autoscale: Autoscale | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ServiceSpec:
        if (self.command is None) == (self.script is None):
            raise ValueError("give exactly one of command or script")
        if self.command is not None and not self.command:
            raise ValueError("command: empty")
        names = [p.name for p in self.ports]
        if len(set(names)) != len(names):
            raise ValueError("ports: names must be distinct")
        fixed = [p.port for p in self.ports if p.port]
        if len(set(fixed)) != len(fixed):
            raise ValueError("ports: the same port number twice")
        for kind in ("startup", "readiness", "liveness"):
            probe = getattr(self.probes, kind)
            check = probe and (probe.http or probe.tcp)
            if check and check.port not in names:
                known = ", ".join(names) or "none"
                raise ValueError(f"probes.{kind}: port {check.port!r} is not one of ports ({known})")
        if self.autoscale is not None and self.autoscale.min_replicas > self.autoscale.max_replicas:
            raise ValueError("autoscale: min_replicas is above max_replicas")
        return self


__all__ = ["Autoscale", "Placement", "PortSpec", "ProbeSpec", "Probes", "RestartPolicy", "ServiceSpec", "UpdatePolicy"]
