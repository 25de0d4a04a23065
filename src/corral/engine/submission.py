"""Submission policy: whether a submission is accepted and which jobs it creates, decided the same way for
the live controller and the simulator (the SubmissionRequested event is the one way in).

Pure: the cluster (partitions, nodes, tenancy, reservations, the jobs the engine holds) and a read-only
archive of the jobs it no longer holds are inputs. Every check runs before anything is created, so a
refused submission, an array included, changes nothing; a refusal is an AdmissionError whose message the
user sees."""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from corral.api.schemas import JobSubmit
from corral.engine.admission import AdmissionError, PartitionMembers, admit_full
from corral.engine.config import EngineConfig
from corral.engine.job_refs import UnknownRef, named_job_ids
from corral.engine.records import Job, JobSpec, Node
from corral.engine.reservations import Reservations
from corral.engine.tenancy import Tenancy
from corral.jobref import JobIdError, ascii_number, parse_job_ref


class JobArchive(Protocol):
    """Jobs the engine no longer holds (ended ones), read by id: dependency targets. The live controller's
    store is one; the simulator has none."""

    def get_job(self, job_id: int) -> Job | None: ...


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What a submission is judged against: the engine's state, read only."""

    config: EngineConfig
    nodes: Iterable[Node] | PartitionMembers
    tenancy: Tenancy
    reservations: Reservations
    jobs: Mapping[int, Job]  # the jobs the engine holds
    next_job_id: int


@dataclass(frozen=True, slots=True)
class Accepted:
    specs: list[JobSpec]  # one, or one per array task in index order (their ids follow next_job_id)
    array: bool
    held: bool
    dependency_targets: list[Job]  # the jobs the dependency names, for the engine to know their states


def decide(sub: JobSubmit, cluster: ClusterView, archive: JobArchive | None = None) -> Accepted:
    """The jobs the submission creates, or AdmissionError saying why it is refused."""
    admitted = admit_full(sub, cluster.config, cluster.nodes, cluster.tenancy)
    spec = admitted.spec
    indices = admitted.array_indices
    _check_submit_limit(spec, len(indices) if indices is not None else 1, cluster)
    if spec.reservation:
        _check_reservation(spec, cluster.reservations)
    targets: list[Job] = []
    if spec.dependency:
        def lookup(job_id: int) -> Job | None:
            return cluster.jobs.get(job_id) or (archive.get_job(job_id) if archive is not None else None)

        text, targets = resolve_dependency(spec.dependency, lookup)
        spec = replace(spec, dependency=text)
    if indices is None:
        return Accepted([spec], False, sub.hold, targets)
    base = cluster.next_job_id
    specs = [replace(spec, array_job_id=base, array_task_id=index) for index in indices]
    return Accepted(specs, True, sub.hold, targets)


def _check_submit_limit(spec: JobSpec, new_jobs: int, cluster: ClusterView) -> None:
    tenancy = cluster.tenancy
    for kind, name, limit in tenancy.submit_limits(spec.user, spec.account):
        if kind == "user":
            count = sum(1 for j in cluster.jobs.values() if j.spec.user == name)
        else:
            count = sum(1 for j in cluster.jobs.values() if name in tenancy.ancestors(j.spec.account))
        if count + new_jobs > limit:
            raise AdmissionError(f"job violates accounting/QOS policy (job submit limit): {kind} {name} has "
                                 f"{count} jobs, {new_jobs} more would pass its max_submit_jobs {limit}")


def _check_reservation(spec: JobSpec, reservations: Reservations) -> None:
    record = reservations.by_name.get(spec.reservation)
    if record is None:
        raise AdmissionError(f"requested reservation is invalid: {spec.reservation!r}")
    if not record.allows(spec.user, spec.account):
        raise AdmissionError(f"access denied to reservation {spec.reservation!r} for {spec.user}/{spec.account}")


def resolve_dependency(text: str, lookup: Callable[[int], Job | None]) -> tuple[str, list[Job]]:
    """The dependency with raw ids (`12`, `12_3`, an array's id as users write them), and every job it
    names."""
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
