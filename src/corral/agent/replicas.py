"""What the agent does for a service replica beyond running its tasks (issue 22): its ports, held from its
launch until its end here (ports.py), and its probes, run while it runs on its first node (probes.py).

A launch without ports or probes (every batch job) passes through untouched. A launch with them gets its
ports before anything starts: their numbers go into the tasks' environment (CORRAL_PORT_<NAME>, PORT) and
into the launch as the spool keeps it, so that an agent restarted under a running replica holds the same
ports and probes them again. A port that cannot be had, or a probe naming a port the launch lacks, refuses
the launch with the reason (its tasks never start; the controller sees NodeFinished with that error).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from corral.agent.checks import TaskContext, TaskLauncher
from corral.agent.environment import scrub_environment
from corral.agent.ports import PortBook, PortUnavailable, port_variables
from corral.agent.probes import ProbeRunner, ProbeSpecError, build_check, check_spec, probes_of
from corral.agent.runner import JobRunner
from corral.protocol import LaunchJob, PortRequest, ProbesReported

log = logging.getLogger(__name__)

PROBE_EXITS = "probes"  # under the spool: the exit records of exec probes' leaders while they run


class Replicas:
    """The ports and probes of the service replicas on this node. `report` posts a ProbesReported."""

    def __init__(self, node: str, address: str, spool_dir: Path, base_env: Mapping[str, str],
                 report: Callable[[ProbesReported], None]) -> None:
        self._node = node
        self._address = address  # probes go where the gateway's requests go
        self._exit_dir = Path(spool_dir) / PROBE_EXITS
        self._base_env = dict(base_env)
        self._report = report
        self._book = PortBook(node)
        self._ports: dict[int, dict[str, int]] = {}  # job id -> its ports here, by name
        self._probing: dict[int, asyncio.Task[None]] = {}

    def ports(self, job_id: int) -> dict[str, int]:
        return dict(self._ports.get(job_id, {}))

    def prepare(self, launch: LaunchJob) -> tuple[LaunchJob, str | None]:
        """The launch as its tasks get it (its ports chosen and in their environment), and why it must be
        refused (None: it may start). Nothing is held for a refused launch."""
        if not launch.ports and launch.probes is None:
            return launch, None
        try:
            if launch.probes is not None:
                for name, spec in probes_of(launch.probes).items():
                    check_spec(spec, [p.name for p in launch.ports], name)
            ports = self._book.reserve(launch.job_id, launch.ports)
        except (ProbeSpecError, PortUnavailable) as exc:
            return launch, str(exc)
        self._ports[launch.job_id] = ports
        log.info("job %d: ports %s on %s", launch.job_id, ports, self._node)
        resolved = [PortRequest(name=name, port=port) for name, port in ports.items()]
        return launch.model_copy(update={"env": {**launch.env, **port_variables(ports)}, "ports": resolved}), None

    def adopt(self, launch: LaunchJob) -> None:
        """Hold the ports of a replica an earlier agent started (its launch has them resolved)."""
        if not launch.ports:
            return
        ports = {request.name: request.port for request in launch.ports}
        for clash in self._book.keep(launch.job_id, ports):
            log.error("job %d (adopted): %s", launch.job_id, clash)
        self._ports[launch.job_id] = ports

    def start_probes(self, runner: JobRunner) -> None:
        """Probe a replica whose tasks run (or were adopted) here, if it has probes and this is its first node."""
        launch = runner.launch
        if launch.probes is None or launch.node_index != 0 or launch.job_id in self._probing:
            return
        task = asyncio.get_running_loop().create_task(self._probe(runner), name=f"probes-{launch.job_id}")
        self._probing[launch.job_id] = task

    def finished(self, job_id: int) -> None:
        """The replica's tasks here are done: stop probing it and free its ports."""
        task = self._probing.pop(job_id, None)
        if task is not None:
            task.cancel()
        self._book.release(job_id)
        self._ports.pop(job_id, None)

    async def _probe(self, runner: JobRunner) -> None:
        launch = runner.launch
        assert launch.probes is not None
        env = {**scrub_environment(self._base_env), **launch.env}

        def context() -> TaskContext:
            identity = runner.identity
            variables = {} if identity is None else identity.variables
            return TaskContext(identity, tuple(runner.cgroup_leaves()), launch.workdir, {**env, **variables})

        launcher = TaskLauncher(context, self._exit_dir)
        # No credential of the agent's goes to the replica; a fresh connection per probe, as the kubelet's.
        async with httpx.AsyncClient(trust_env=False, follow_redirects=False,
                                     limits=httpx.Limits(max_keepalive_connections=0)) as client:
            try:
                checks = {name: (spec, build_check(spec, host=self._address, ports=self.ports(launch.job_id),
                                                   exec_launcher=launcher, http=client))
                          for name, spec in probes_of(launch.probes).items()}
            except ProbeSpecError as exc:  # prepare() refused such launches; an adopted one may still have it
                log.error("job %d: its probes cannot run: %s", launch.job_id, exc)
                return
            probes = ProbeRunner(launch.job_id, launch.restart_count, checks, self._report)
            try:
                await probes.run()
            except Exception:  # a bug must not take the agent down; the replica runs on unprobed
                log.exception("job %d: probing failed", launch.job_id)
