"""The web dashboard's routes: its page at / for browsers (the JSON index for other clients), its static
files under /dashboard/, and the API reads only it needs: the cluster's GPU utilisation over time, a job's
usage samples over time (controller/telemetry.py) and the end of a job's output (controller/output_tail.py).
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.controller.output_tail import DEFAULT_TAIL_BYTES, MAX_TAIL_BYTES, OutputUnavailable, read_tail
from corral.controller.params import JobIdPath
from corral.controller.service import ControllerService
from corral.dashboard import STATIC_DIR
from corral.protocol import API_PREFIX

ASSETS_PATH = "/dashboard"
# The page runs only its own scripts and styles, and draws its charts as inline SVG: a value shown on it
# can never run as code, and the token it keeps cannot be sent anywhere but here.
PAGE_HEADERS = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
                "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"}
ERRORS: dict[int | str, dict[str, Any]] = {status: {"description": text} for status, text in
          ((401, "not authenticated"), (403, "not the job's owner, a coordinator of its account, nor an operator"),
           (404, "unknown job, or its output is not readable on the controller's host"),
           (409, "the job has not started"))}


def dashboard_routes(app: FastAPI, service: ControllerService, guard: Guard, index: Callable[[], dict]) -> None:
    """`index()`: the JSON that / answers to clients that do not ask for HTML."""
    app.mount(ASSETS_PATH, StaticFiles(directory=STATIC_DIR), name="dashboard")

    @app.get("/", include_in_schema=False)
    async def root(request: Request) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return FileResponse(STATIC_DIR / "index.html", media_type="text/html", headers=PAGE_HEADERS)
        return JSONResponse(index())

    @app.get(f"{API_PREFIX}/utilisation", dependencies=[Depends(guard.user)])
    async def utilisation() -> dict:
        """The cluster's allocated and total GPUs (of the nodes that are up) over the last hour: one sample
        per `step_s`, the latest state seen in it. Kept in the controller's memory: a restarted or new
        leader starts afresh. With the number of running and pending jobs now (counted, not listed: the
        overview stays small however long the queue)."""
        service.record_utilisation()
        views = service.engine.views
        return {"step_s": service.utilisation.step_s, "samples": service.utilisation.samples(),
                "running_jobs": len(views.running), "pending_jobs": len(views.pending)}

    @app.get(f"{API_PREFIX}/jobs/{{job_id}}/telemetry", dependencies=[Depends(guard.user)], responses=ERRORS)
    async def telemetry(job_id: JobIdPath) -> dict:
        """The job's usage over its nodes each time an agent reported it (gpu_util_pct, rss_kib, cpu_s,
        gpus, nodes), oldest first; kept in memory for the newest jobs, lost on restart."""
        samples = service.job_series.of(job_id)
        if not samples and service.find_job(job_id) is None:  # a job with samples exists: no store read
            raise HTTPException(404, f"invalid job id specified: {job_id}")
        return {"job_id": job_id, "samples": samples}

    @app.get(f"{API_PREFIX}/jobs/{{job_id}}/output", responses=ERRORS)
    async def output(job_id: JobIdPath,
                     tail_bytes: int = Query(DEFAULT_TAIL_BYTES, ge=1, le=MAX_TAIL_BYTES),
                     error: bool = Query(False, description="The --error file instead of the output"),
                     from_byte: int | None = Query(None, ge=0, description=(
                         "Follow the file: only what comes after this offset (the previous reply's `end`), "
                         "at most `tail_bytes` of it; past the file's end, its tail as without it")),
                     principal: Principal = Depends(guard.user)) -> dict:
        """The last `tail_bytes` of the job's output file (its first task's, on its first node), read from
        the filesystem the controller shares with the nodes, as `corral logs` reads it: the job's owner,
        a coordinator of its account, or an operator."""
        job = service.find_job(job_id)
        if job is None:
            raise HTTPException(404, f"invalid job id specified: {job_id}")
        refusal = guard.job_refusal(principal, job)
        if refusal:
            await guard.deny(principal, "read output", f"job {job_id}", refusal)
        node = service.engine.nodes.get(job.slices[0].node) if job.slices else None
        try:
            tail = await asyncio.to_thread(read_tail, job, node, tail_bytes, error, from_byte)
        except OutputUnavailable as exc:
            raise HTTPException(exc.status, str(exc)) from None
        return {"job_id": job_id, "path": tail.path, "node": tail.node, "size": tail.size, "text": tail.text,
                "truncated": tail.truncated, "start": tail.start, "end": tail.end}
