"""`POST /api/v1/notebooks/spec`: the session service's spec for `corral notebook`'s options, built by the
code the command line uses (api/notebooks.py), so the dashboard's "Start a notebook" form starts the same
notebook. It changes nothing and grants nothing: the caller then applies the spec (`POST /api/v1/services`)
and makes the link's credential (`POST /api/v1/tokens`) with its own credential, as `corral notebook` does,
so the roles are those of any service (docs/services.md, Notebooks)."""
from __future__ import annotations

import secrets
from typing import Any

from fastapi import Depends, FastAPI

from corral.api.notebooks import NotebookPlan, NotebookRequest, plan
from corral.controller.auth import Principal
from corral.controller.guard import Guard
from corral.protocol import API_PREFIX

ERRORS: dict[int | str, dict[str, Any]] = {422: {"description": "invalid, naming the field"}}


def notebook_routes(app: FastAPI, guard: Guard) -> None:
    @app.post(f"{API_PREFIX}/notebooks/spec", responses=ERRORS)
    async def notebook_spec(body: NotebookRequest, principal: Principal = Depends(guard.user)) -> NotebookPlan:
        """The spec of a notebook with these options (its name, when none is given, nb-USER-XXXX), the body of
        its link's token request, and the link's path on the gateway. Nothing is created."""
        return plan(body, principal.name, secrets.token_hex(2))
