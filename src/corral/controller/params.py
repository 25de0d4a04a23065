"""Path and query parameters of the REST API, bounded by corral.limits like the bodies are."""
from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from corral import limits
from corral.api.fields import Name

JobIdPath = Annotated[int, Path(ge=1, le=limits.JOB_ID_MAX, description="A job id")]
StepIdPath = Annotated[int, Path(ge=0, le=limits.STEP_ID_MAX, description="A step id")]
NamePath = Annotated[Name, Path()]
UidQuery = Annotated[int | None, Query(ge=0, le=limits.UID_MAX, description="Who asks (a uid)")]
NameQuery = Annotated[Name | None, Query()]
EpochQuery = Annotated[float | None, Query(ge=0, le=limits.TIME_MAX_S, allow_inf_nan=False)]
SeqQuery = Annotated[int, Query(ge=0, le=limits.INT64_MAX)]


def job_ids(text: str) -> list[int]:
    """A comma-separated list of job ids, each 1..JOB_ID_MAX (raises LimitError)."""
    items = text.split(",")
    if len(items) > limits.LIST_MAX_ITEMS:
        raise limits.LimitError(f"ids: {len(items)} job ids are too many: the limit is {limits.LIST_MAX_ITEMS}")
    return [limits.parse_int(item.strip(), "ids", 1, limits.JOB_ID_MAX) for item in items]
