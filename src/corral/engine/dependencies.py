"""Job dependencies with Slurm's semantics.

`afterok:1:2,afterany:3` needs every clause (`,`); `afterok:1?afternotok:2` needs any (`?`). Kinds:
after (the job started, or ended), afterok (ended COMPLETED), afternotok (ended in any other state),
afterany (ended), singleton (no earlier job of the same name and user is pending or running).
A clause that can no longer be satisfied makes the job wait with DependencyNeverSatisfied.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from corral.engine.records import JobState
from corral.jobref import JobIdError, ascii_number, parse_job_ref

KINDS = ("after", "afterok", "afternotok", "afterany")


class DependencyError(ValueError):
    pass


class Status(Enum):
    SATISFIED = "satisfied"
    WAITING = "waiting"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Clause:
    kind: str
    targets: tuple[tuple[int, int | None], ...] = ()  # (job id, array task index or None)


@dataclass(frozen=True, slots=True)
class Dependency:
    clauses: tuple[Clause, ...]
    any_of: bool  # `?`-joined


def parse_dependency(text: str) -> Dependency:
    text = text.strip()
    if not text:
        raise DependencyError("empty dependency")
    if "," in text and "?" in text:
        raise DependencyError(f"dependency {text!r} mixes ',' and '?'")
    any_of = "?" in text
    clauses = []
    for part in re.split(r"[,?]", text):
        if part == "singleton":
            clauses.append(Clause("singleton"))
            continue
        kind, _, ids = part.partition(":")
        if kind not in KINDS or not ids:
            raise DependencyError(f"invalid dependency {part!r} (after, afterok, afternotok, afterany, singleton)")
        clauses.append(Clause(kind, tuple(_target(token, part) for token in ids.split(":"))))
    return Dependency(tuple(clauses), any_of)


def _target(token: str, part: str) -> tuple[int, int | None]:
    """`N`, `N_I`, either with a `+minutes` delay -> (N, I or None)."""
    ref_text, plus, delay = token.partition("+")
    try:
        ref = parse_job_ref(ref_text)
    except JobIdError as exc:
        raise DependencyError(f"{exc} in dependency {part!r}") from None
    if plus and ascii_number(delay) is None:
        raise DependencyError(f"invalid delay {token!r} in dependency {part!r}: expected +minutes (ASCII digits)")
    return ref.job_id, ref.tasks[0][0] if ref.tasks else None


def clause_status(kind: str, states: list[JobState | None], started: list[bool]) -> Status:
    """One clause over its targets' states (None: never existed / unknown)."""
    result = Status.SATISFIED
    for state, has_started in zip(states, started, strict=True):
        if state is None:
            return Status.NEVER
        ended = state.terminal
        if kind == "after":
            ok = has_started or ended
            never = False
        elif kind == "afterany":
            ok, never = ended, False
        elif kind == "afterok":
            ok, never = state is JobState.COMPLETED, ended and state is not JobState.COMPLETED
        else:  # afternotok
            ok, never = ended and state is not JobState.COMPLETED, state is JobState.COMPLETED
        if never:
            return Status.NEVER
        if not ok:
            result = Status.WAITING
    return result


def combine(statuses: list[Status], any_of: bool) -> Status:
    if any_of:
        if Status.SATISFIED in statuses:
            return Status.SATISFIED
        return Status.NEVER if all(s is Status.NEVER for s in statuses) else Status.WAITING
    if Status.NEVER in statuses:
        return Status.NEVER
    return Status.SATISFIED if all(s is Status.SATISFIED for s in statuses) else Status.WAITING
