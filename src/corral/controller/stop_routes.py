"""`POST /cluster/stop`: stopping the cluster's jobs before the cluster itself stops (see
corral.engine.shutdown). `corral up` sends it while its agents still run, so that every job's tasks are
killed and reported through the usual path, and waits for the reply before it stops the agents and the
controller. The controller starts no job afterwards: it is meant to be stopped next."""
from __future__ import annotations

import asyncio
import time

from fastapi import Depends, FastAPI, Query

from corral.api.schemas import ClusterStopOut, StoppedJob
from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.controller.service import ControllerService
from corral.engine.events import ClusterStopRequested
from corral.engine.records import JobState
from corral.engine.shutdown import ClusterStop
from corral.protocol import API_PREFIX

STOP_POLL_S = 0.1
STOPPING = (JobState.RUNNING, JobState.COMPLETING)


def stop_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:
    @app.post(f"{API_PREFIX}/cluster/stop")
    async def stop_cluster(wait_s: float = Query(60.0, ge=0, le=3600),
                           principal: Principal = Depends(guard.user)) -> ClusterStopOut:
        """Stop every running job (requeued when it allows it, else NODE_FAIL) and start nothing more;
        answer once their tasks are reported gone, or after `wait_s` (at most the kill grace plus the
        report timeout)."""
        await guard.require(principal, "admin", "stop the cluster")
        decision: ClusterStop = await service.request(ClusterStopRequested())
        config = service.engine.config
        deadline = time.monotonic() + min(wait_s, config.kill_grace_s + config.kill_report_timeout_s)
        while _unsettled(service, decision) and time.monotonic() < deadline:
            await asyncio.sleep(STOP_POLL_S)
        return _report(service, decision)


def _unsettled(service: ControllerService, decision: ClusterStop) -> list[int]:
    jobs = service.engine.jobs
    return [i for i in decision.stopped if i in jobs and jobs[i].state in STOPPING]


def _report(service: ControllerService, decision: ClusterStop) -> ClusterStopOut:
    unconfirmed = _unsettled(service, decision)
    requeued, ended = [], []
    for job_id in decision.stopped:
        if job_id in unconfirmed:
            continue
        job = service.find_job(job_id)
        assert job is not None, "a job the stop ended or requeued is in the engine or the store"
        if job.state is JobState.PENDING:
            requeued.append(job_id)
        else:
            ended.append(StoppedJob(id=job_id, state=job.state.value))
    return ClusterStopOut(requeued=requeued, ended=ended, unconfirmed=unconfirmed, pending=decision.pending)
