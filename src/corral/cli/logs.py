"""`corral logs JOB [-f]`: a job's output file, as its first task on its first node writes it; `corral logs
SERVICE[/REPLICA] [-f]`: a service's replicas' (cli/services.py).

The controller knows the node and the path (the job's --output / --error pattern expanded as the agent
expands it: render.output_file); the bytes are read where this command runs. corral, like Slurm, expects
job working directories on a filesystem the nodes and the login hosts share, so reading the path is the
simple, honest way: no copy through the controller or an agent, nothing buffered, `-f` is tail -f. Where
the file is not readable here (a node-local directory), the error names the node and the path to read it
on; an agent serving output over HTTP is the alternative for such clusters, not built."""
from __future__ import annotations

import sys
import time
from typing import Annotated, BinaryIO

import typer

from corral.cli import render
from corral.cli.client import Client
from corral.cli.connect import open_client
from corral.cli.errors import CliError
from corral.cli.job_refs import jobs_named
from corral.cli.jobs import UrlOption
from corral.cli.output import fail, reported_errors
from corral.cli.render_services import parse_service_ref
from corral.jobref import JobIdError, JobRef, parse_job_ref

ACTIVE = ("PENDING", "RUNNING", "COMPLETING")
POLL_S = 0.5  # how often -f looks for new bytes
STATE_EVERY_S = 2.0  # and asks whether the job still runs
CHUNK = 1 << 16


def logs(
    target: Annotated[str, typer.Argument(
        metavar="JOB|SERVICE[/REPLICA]", show_default=False,
        help="A job (N, or N_I for task I of array N), or a service's replicas: NAME (all of them) or "
             "NAME/REPLICA (one). A name that is also a job id is the job: use 'corral service logs' for it.")],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing what the job writes until it "
                                         "ends (as tail -f).")] = False,
    error: Annotated[bool, typer.Option("--error", "-e", help="The job's --error file instead of its output "
                                        "(the same file unless --error was given).")] = False,
    url: UrlOption = None,
) -> None:
    """Print a job's output file (its first task's, on its first node), read from the filesystem the nodes
    share; -f follows it until the job ends. For a service, its replicas' (as tail does several files)."""
    try:
        job_ref = parse_job_ref(target)
    except JobIdError:
        service_logs(target, follow, error, url)
        return
    with reported_errors(), open_client(url) as client:
        show_output(client, _one_job(client, job_ref), follow, error)


def show_output(client: Client, job: dict, follow: bool, error: bool) -> None:
    """Print one job's output file, following it while the job runs when `follow`."""
    if follow:
        while job["state"] == "PENDING":  # its file is named once it has a node (%N)
            time.sleep(STATE_EVERY_S)
            job = client.job(job["id"])
    path = output_path(job, error)
    stream = _open(job, path, follow, client)
    with stream:
        try:
            _copy(stream, client, job, follow)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def _one_job(client: Client, job_id: JobRef) -> dict:
    jobs = jobs_named(client, job_id)
    if not jobs:
        fail(f"job {job_id} not found")
    if len(jobs) > 1:
        fail(f"{job_id} names {len(jobs)} jobs (an array): give one task, e.g. {jobs[0]['id']}")
    return jobs[0]


def output_path(job: dict, error: bool) -> str:
    pattern = job["error"] if error and job.get("error") else job["output"]
    return render.output_file(job, pattern)


def _node(job: dict) -> str:
    return job["slices"][0]["node"] if job.get("slices") else "(no node yet)"


def _open(job: dict, path: str, follow: bool, client: Client) -> BinaryIO:
    """The file, waiting for it while a followed job starts writing it."""
    while True:
        try:
            return open(path, "rb")
        except FileNotFoundError:
            if not (follow and job["state"] in ACTIVE):
                break
        except OSError as exc:
            fail(f"cannot read {path} ({exc.strerror}): job {job['id']}'s output is on {_node(job)}")
        time.sleep(STATE_EVERY_S)
        job = client.job(job["id"])
    if job["state"] == "PENDING":
        fail(f"job {job['id']} has not started: it has no output yet (corral logs -f waits for it)")
    fail(f"{path} does not exist here: job {job['id']}'s output is written on {_node(job)}; corral logs reads "
         "it from a filesystem shared with the nodes")


def _copy(stream: BinaryIO, client: Client, job: dict, follow: bool) -> None:
    out = sys.stdout.buffer
    asked = time.monotonic()
    ended = job["state"] not in ACTIVE
    while True:
        data = stream.read(CHUNK)
        if data:
            out.write(data)
            out.flush()
            continue
        if not follow or ended:
            return
        if time.monotonic() - asked >= STATE_EVERY_S:
            asked = time.monotonic()
            # Once it has ended, one more read takes what it wrote last.
            ended = client.job(job["id"])["state"] not in ACTIVE
            continue
        time.sleep(POLL_S)


# ----- a service's replicas (corral logs SERVICE[/REPLICA], corral service logs)

def service_logs(target: str, follow: bool, error: bool, url: str | None) -> None:
    try:
        name, index = parse_service_ref(target)
    except ValueError as exc:
        fail(str(exc), code=2)
    with reported_errors(), open_client(url) as client:
        found = replica_jobs(client, name, index)
        if len(found) == 1:
            show_output(client, found[0][1], follow, error)
            return
        try:
            _tail_many(client, found, follow, error)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def replica_jobs(client: Client, name: str, index: int | None) -> list[tuple[str, dict]]:
    """Each replica's label (`web/1`) and job (of one replica: its newest job), or CliError saying why
    there is none."""
    replicas = [r for r in client.service(name)["replicas"] if r.get("job_id") is not None]
    if index is not None:
        chosen = [r for r in replicas if r["index"] == index][:1]  # newest first: the current revision's
        if not chosen:
            known = ", ".join(str(i) for i in sorted({r["index"] for r in replicas})) or "none"
            raise CliError(f"service {name} has no replica {index} (its replicas: {known})")
        replicas = chosen
    if not replicas:
        raise CliError(f"service {name} has no replicas running or waiting: no output to show")
    return [(f"{name}/{r['index']}", client.job(r["job_id"])) for r in replicas]


def _tail_many(client: Client, replicas: list[tuple[str, dict]], follow: bool, error: bool) -> None:
    """Several replicas' files: each new piece under a `==> web/1 (job N) <==` header, as tail prints
    several files; those not readable here are named and left out."""
    streams = _open_outputs(replicas, error)
    try:
        last: list[str] = []
        while True:
            wrote = [_copy_new(label, stream, last) for label, stream in streams]
            if any(wrote):
                continue
            if not follow or not any(client.job(job["id"])["state"] in ACTIVE for _name, job in replicas):
                return
            time.sleep(POLL_S)
    finally:
        for _label, stream in streams:
            stream.close()


def _open_outputs(replicas: list[tuple[str, dict]], error: bool) -> list[tuple[str, BinaryIO]]:
    streams: list[tuple[str, BinaryIO]] = []
    for name, job in replicas:
        label = f"{name} (job {job['id']})"
        path = output_path(job, error)
        try:
            streams.append((label, open(path, "rb")))
        except OSError as exc:
            node = job["slices"][0]["node"] if job.get("slices") else "no node yet"
            typer.echo(f"corral: {label}: cannot read {path} ({exc.strerror}); it is written on {node}", err=True)
    if not streams:
        fail("none of the replicas' output files can be read here")
    return streams


def _copy_new(label: str, stream: BinaryIO, last: list[str]) -> bool:
    """Copy what `stream` has new, under its header when another file's came last; whether it had any."""
    data = stream.read(CHUNK)
    if not data:
        return False
    out = sys.stdout.buffer
    if last[-1:] != [label]:
        out.write(f"{chr(10) if last else ''}==> {label} <==\n".encode())
        last[:] = [label]
    out.write(data)
    out.flush()
    return True
