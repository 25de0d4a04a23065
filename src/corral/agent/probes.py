"""A service replica's probes, run by the agent of the replica's first node (issue 22), with Kubernetes'
semantics (pkg/kubelet/prober):

- each probe is a Check (checks.py: HTTP GET, TCP connect, or a program run as the replica's user in its
  cgroup), run after `initial_delay_s` and then every `period_s`, each run given `timeout_s`;
- `success_threshold` successes in a row make a probe pass, `failure_threshold` failures in a row make
  it fail; only a flip is reported (ProbesReported), with the run of results that caused it and the last
  check's detail, so the engine can say "liveness probe failed 3 times: HTTP 500";
- `startup` runs first, alone: readiness and liveness start only once it passed (a model that loads for
  minutes is not killed meanwhile). A startup probe that fails is a liveness failure (`restart`), and
  probing stops: the replica is restarted;
- readiness starts failed (a replica gets traffic only once it passed), liveness starts passing (a
  replica is restarted only once it failed). Without a readiness probe a replica is ready once its
  startup probe passed; without either, the engine takes it as ready when it starts, and nothing is sent.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from corral.agent.checks import Check, CheckResult, ExecCheck, HttpCheck, Launcher, TcpCheck, every
from corral.protocol import ProbeName, ProbeSpec, ProbesReported, ProbesSpec, ProbeStatus

log = logging.getLogger(__name__)


class ProbeSpecError(Exception):
    """A launch's probe cannot be run as given (no check, two checks, a port it does not name)."""


@dataclass(slots=True)
class ProbeState:
    """One probe's threshold logic, pure: `observe` each result; a flip comes back as a ProbeStatus."""

    name: ProbeName
    success_threshold: int
    failure_threshold: int
    ok: bool | None  # None: not decided yet (startup)
    successes: int = 0  # in a row
    failures: int = 0  # in a row

    @classmethod
    def initial(cls, name: ProbeName, spec: ProbeSpec) -> ProbeState:
        starts = {"startup": None, "readiness": False, "liveness": True}[name]
        return cls(name, spec.success_threshold, spec.failure_threshold, starts)

    def observe(self, result: CheckResult) -> ProbeStatus | None:
        if result.ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.ok is not True and self.successes >= self.success_threshold:
                self.ok = True
                return ProbeStatus(probe=self.name, ok=True, consecutive=self.successes, detail=result.detail)
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.ok is not False and self.failures >= self.failure_threshold:
                self.ok = False
                return ProbeStatus(probe=self.name, ok=False, consecutive=self.failures, detail=result.detail,
                                   restart=self.name != "readiness")
        return None


def check_spec(spec: ProbeSpec, port_names: list[str], name: str = "probe") -> None:
    """ProbeSpecError naming what is wrong with a probe spec, given the replica's port names."""
    given = [kind for kind in ("http", "tcp", "exec") if getattr(spec, kind) is not None]
    if len(given) != 1:
        raise ProbeSpecError(f"the {name} probe needs exactly one of http, tcp, exec; it has "
                             f"{' and '.join(given) or 'none'}")
    target = spec.http or spec.tcp
    if target is not None and target.port not in port_names:
        known = ", ".join(port_names) or "none"
        raise ProbeSpecError(f"the {name} probe's port '{target.port}' is not one of the replica's ports ({known})")


def build_check(spec: ProbeSpec, *, host: str, ports: dict[str, int], exec_launcher: Launcher,
                http: httpx.AsyncClient) -> Check:
    """The Check a probe spec asks for (`http`: the client HTTP checks use); ProbeSpecError naming what is
    wrong."""
    check_spec(spec, list(ports))
    if spec.exec is not None:
        return ExecCheck(spec.exec.command, spec.timeout_s, exec_launcher)
    target = spec.http or spec.tcp
    assert target is not None
    port = ports[target.port]
    if spec.http is not None:
        url_host = f"[{host}]" if ":" in host else host
        return HttpCheck(f"http://{url_host}:{port}{spec.http.path}", spec.timeout_s, http)
    return TcpCheck(host, port, spec.timeout_s)


@dataclass
class ProbeRunner:
    """One replica's probes on this node: `run()` works until cancelled (or a startup probe failed),
    calling `report` with each ProbesReported."""

    job_id: int
    restart_count: int
    probes: dict[ProbeName, tuple[ProbeSpec, Check]]
    report: Callable[[ProbesReported], None]
    _states: dict[ProbeName, ProbeState] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._states = {name: ProbeState.initial(name, spec) for name, (spec, _) in self.probes.items()}

    @property
    def ready(self) -> bool:
        startup, readiness = self._states.get("startup"), self._states.get("readiness")
        if startup is not None and startup.ok is not True:
            return False
        return readiness.ok is True if readiness is not None else True

    async def run(self) -> None:
        if "startup" in self.probes:
            await self._probe("startup", until_decided=True)
            if self._states["startup"].ok is not True:
                log.warning("job %d: startup probe failed; probing stops until it is restarted", self.job_id)
                return
        async with asyncio.TaskGroup() as group:
            for name in ("readiness", "liveness"):
                if name in self.probes:
                    group.create_task(self._probe(name))

    async def _probe(self, name: ProbeName, until_decided: bool = False) -> None:
        spec, check = self.probes[name]
        state = self._states[name]

        def observe(result: CheckResult) -> bool:
            flip = state.observe(result)
            if flip is not None:
                log.info("job %d: %s probe %s after %d: %s", self.job_id, name, "passed" if flip.ok else "failed",
                         flip.consecutive, flip.detail)
                self.report(ProbesReported(job_id=self.job_id, restart_count=self.restart_count, ready=self.ready,
                                           results=[flip]))
            return not (until_decided and state.ok is not None)

        await every(check, spec.period_s, observe, initial_delay_s=spec.initial_delay_s)


def probes_of(spec: ProbesSpec) -> dict[ProbeName, ProbeSpec]:
    found: dict[ProbeName, ProbeSpec | None] = {"startup": spec.startup, "readiness": spec.readiness,
                                                "liveness": spec.liveness}
    return {name: probe for name, probe in found.items() if probe is not None}
