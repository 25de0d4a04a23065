"""Path parameters that name a job record or a step: ASCII digits within what the database stores;
other path and query parameters bounded by corral.limits like the bodies are.

FastAPI's int would read `1_5` as 15, `15.0` as 15 and ` 3` as 3 (pydantic's lax parsing), and pass
ids past 2**63-1 to SQLite, which fails with a 500: the check runs before the int conversion."""
from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BeforeValidator

from corral import limits
from corral.api.fields import Name
from corral.jobref import MAX_ID, JobIdError, ascii_number, parse_job_id


def _job_id(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_job_id(value)
        except JobIdError as exc:
            hint = "; the path takes a job's own id (each array task has one: GET /jobs?ids=N_I finds it)"
            raise ValueError(f"{exc}{hint if '_' in value else ''}") from None
    return value


def _step_id(value: object) -> object:
    if isinstance(value, str) and ascii_number(value) is None:
        raise ValueError(f"invalid step id {value!r}: expected a number from 0 to {MAX_ID} (ASCII digits only)")
    return value


JobIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="A job's own id (each array task has one)."),
                      BeforeValidator(_job_id)]
StepIdPath = Annotated[int, Path(ge=0, le=MAX_ID, description="The step's number within its job."),
                       BeforeValidator(_step_id)]
NamePath = Annotated[Name, Path()]
UidQuery = Annotated[int | None, Query(ge=0, le=limits.UID_MAX, description="Who asks (a uid)")]
NameQuery = Annotated[Name | None, Query()]
EpochQuery = Annotated[float | None, Query(ge=0, le=limits.TIME_MAX_S, allow_inf_nan=False)]
SeqQuery = Annotated[int, Query(ge=0, le=limits.INT64_MAX)]
# Paging of job lists: ids above `after`, at most `limit` jobs.
AfterQuery = Annotated[int | None, Query(ge=0, le=MAX_ID, description="Only jobs with a larger id (paging)")]
LimitQuery = Annotated[int | None, Query(ge=1, le=limits.COUNT_MAX, description="At most this many jobs")]
# A job list's projection (controller/projection.py): comma-separated JobOut field names.
FieldsQuery = Annotated[str | None, Query(max_length=2000, description="Rows of these JobOut fields, in order")]
ColumnsQuery = Annotated[bool, Query(description="With fields: a list per field ({\"columns\": [...]}), not rows")]
