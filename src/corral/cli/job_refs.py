"""Job ids on the command line, in Slurm's forms (corral.jobref): `N`, `N_I`, `N_[I-J,K]`. Every
argument is checked before anything is sent, so a bad one stops the command with a usage error
naming it, and nothing has been touched."""
from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from corral.cli.client import Client
from corral.jobref import JobIdError, JobRef, parse_job_ref


def _parser(**forms: bool) -> Callable[[str], JobRef]:
    def parse(text: str) -> JobRef:
        try:
            return parse_job_ref(text, **forms)
        except JobIdError as exc:
            raise typer.BadParameter(str(exc)) from None

    return parse


JobRefArgument = Annotated[JobRef, typer.Argument(
    parser=_parser(), show_default=False,
    help="N, or N_I for task I of array N. An array's id N shows every task of it, as scontrol show job.")]
JobRefsArgument = Annotated[list[JobRef], typer.Argument(
    parser=_parser(task_lists=True), show_default=False,
    help="N (an array's id N: every task of it, as Slurm), N_I (task I of array N) or N_[I-J,K] (those tasks).")]


def jobs_named(client: Client, ref: JobRef) -> list[dict]:
    """Every record `ref` names, finished ones included, by id; none when it names no job."""
    return client.jobs(ids=[ref.text], include_finished=True)


def names_array(ref: JobRef, jobs: list[dict]) -> bool:
    """Whether `ref` is an array's own id (and so stands for all its tasks)."""
    return ref.tasks is None and bool(jobs) and jobs[0].get("array_job_id") == ref.job_id
