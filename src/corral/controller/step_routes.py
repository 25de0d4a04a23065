"""HTTP routes for job steps (srun) and for ending an allocation (salloc)."""
from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Query

from corral import container_options
from corral.api.schemas import JobOut
from corral.api.steps import CompleteBody, StepAttach, StepOut, StepSubmit
from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.controller.params import JobIdPath, StepIdPath
from corral.controller.service import ControllerService
from corral.controller.step_views import step_out
from corral.engine.engine import UnknownJob, WrongState
from corral.engine.events import AllocationCompleted, StepRequested
from corral.engine.steps import JobNotRunning, StepRefused, StepRequest
from corral.protocol import API_PREFIX, AttachStep

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "unknown job or step"}, 409: {"description": "wrong state"},
    422: {"description": "the step does not fit the allocation"},
    503: {"description": "the database cannot be written: nothing was changed"}}
STEP_POLL_S = 0.2

R = TypeVar("R")


def step_routes(app: FastAPI, service: ControllerService, guard: Guard) -> None:
    auth = Depends(guard.user)
    user_dep = Depends(guard.user)
    # service.engine, not a copy of it here: the service replaces its engine after a failed commit.
    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/steps", status_code=201, responses=ERRORS)
    async def create_step(job_id: JobIdPath, body: StepSubmit, principal: Principal = user_dep) -> StepOut:
        await guard.job_action(principal, service.find_job(job_id), "step", job_id)
        launch = body.model_dump(include={"argv", "workdir", "env", "output", "error", "input", "io_host",
                                          "io_port", "io_token", "cpus_per_task", "pty", "pty_rows",
                                          "pty_cols"}) | container_options.given(body.model_dump())
        request = StepRequest(
            name=body.name or body.argv[0].rsplit("/", 1)[-1], nodes=body.nodes, ntasks=body.ntasks,
            ntasks_per_node=body.ntasks_per_node, nodelist=tuple(body.nodelist), exclude=tuple(body.exclude),
            constraint=body.constraint or "", gpus_per_task=body.gpus_per_task, launch=launch)
        step = await _guarded(service.request(StepRequested(job_id, request)), job_id)
        return step_out(service.engine.jobs[job_id], step)

    @app.get(f"{API_PREFIX}/jobs/{{job_id}}/steps/{{step_id}}", dependencies=[auth], responses=ERRORS)
    async def get_step(job_id: JobIdPath, step_id: StepIdPath, wait_s: float = Query(0.0, ge=0, le=60)) -> StepOut:
        """With wait_s: answer once the step has ended, or after wait_s."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            job = service.find_job(job_id)
            if job is None or step_id >= len(job.steps):
                raise HTTPException(404, f"job {job_id} has no step {step_id}")
            step = job.steps[step_id]
            if not step.live or asyncio.get_running_loop().time() >= deadline:
                return step_out(job, step)
            await asyncio.sleep(STEP_POLL_S)

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/steps/{{step_id}}/attach", responses=ERRORS)
    async def attach_step(job_id: JobIdPath, step_id: StepIdPath, body: StepAttach,
                          principal: Principal = user_dep) -> StepOut:
        """sattach: the running step's nodes connect to this listener too. Only the job's owner (or an
        admin) may: what the step reads and writes is theirs, keystrokes included (Slurm: owner or root)."""
        job = service.find_job(job_id)
        if job is not None and not principal.admin and (principal.uid, principal.name) != (job.spec.uid,
                                                                                            job.spec.user):
            await guard.deny(principal, "attach", f"step {job_id}.{step_id}",
                             f"step {job_id}.{step_id} belongs to {job.spec.user}; only its owner may attach")
        if job is None or step_id >= len(job.steps):
            raise HTTPException(404, f"job {job_id} has no step {step_id}")
        step = job.steps[step_id]
        if not step.live:
            raise HTTPException(409, "Job/step already completing or completed")
        await guard.allow(principal, "attach", f"step {job_id}.{step_id}")
        for node in step.nodes:
            service.outbox.put(node, AttachStep(job_id=job_id, step_id=step_id, io_host=body.io_host,
                                                io_port=body.io_port, io_token=body.io_token))
        return step_out(job, step)

    @app.post(f"{API_PREFIX}/jobs/{{job_id}}/complete", responses=ERRORS)
    async def complete(job_id: JobIdPath, body: CompleteBody, principal: Principal = user_dep) -> JobOut:
        """The holder of an allocation (salloc, srun outside a job) is done: end it with this exit status."""
        await guard.job_action(principal, service.find_job(job_id), "complete", job_id)
        await _guarded(service.request(AllocationCompleted(job_id, body.exit_code, body.signal)), job_id)
        return service.job_after_request(job_id)


async def _guarded(action: Awaitable[R], job_id: int) -> R:
    try:
        return await action
    except UnknownJob:
        raise HTTPException(404, f"job {job_id} is not active (unknown or finished)") from None
    except (WrongState, JobNotRunning) as exc:
        raise HTTPException(409, str(exc)) from None
    except StepRefused as exc:
        raise HTTPException(422, str(exc)) from None
