"""Dependency targets as users write them (`12`, `12_3`, an array's id) turned into raw job ids."""
from __future__ import annotations

from collections.abc import Callable

from corral.controller.job_refs import UnknownRef, named_job_ids
from corral.engine.admission import AdmissionError
from corral.engine.records import Job
from corral.jobref import JobIdError, ascii_number, parse_job_ref


def resolve_dependency(text: str, lookup: Callable[[int], Job | None]) -> tuple[str, list[Job]]:
    """The dependency with raw ids, and every job it names (for the engine to know their states)."""
    out_parts: list[str] = []
    named: list[Job] = []
    separator = "?" if "?" in text else ","
    for part in text.split(separator):
        if part == "singleton":
            out_parts.append(part)
            continue
        kind, _, ids = part.partition(":")
        raw: list[str] = []
        for token in ids.split(":"):
            jobs = _targets(token, lookup)
            named.extend(jobs)
            raw.extend(str(j.id) for j in jobs)
        out_parts.append(f"{kind}:{':'.join(raw)}")
    return separator.join(out_parts), named


def _targets(token: str, lookup: Callable[[int], Job | None]) -> list[Job]:
    """`N`, `N_I`, either with a `+minutes` delay: the jobs it names."""
    ref_text, plus, delay = token.partition("+")
    if plus and ascii_number(delay) is None:
        raise AdmissionError(f"invalid delay {token!r} in dependency: expected +minutes (ASCII digits)")
    try:
        ids = named_job_ids(parse_job_ref(ref_text), lookup)
    except JobIdError as exc:
        raise AdmissionError(f"{exc} in dependency") from None
    except UnknownRef as exc:
        raise AdmissionError(f"job dependency problem: {exc}") from None
    return [job for job_id in ids if (job := lookup(job_id)) is not None]
