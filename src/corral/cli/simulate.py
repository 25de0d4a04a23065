"""`corral simulate`: its options and how its errors reach the user; the work is corral.sim.cli's
(imported when the command runs: numpy and the engine cost start-up time)."""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

import typer

from corral.cli.errors import CliError
from corral.cli.output import reported_errors, warn

# As corral.sim.cli.TRACES (a test checks): a Literal lets click list them in errors and complete them.
TraceName = Literal["philly", "bluewaters", "accounting", "sacct", "openb"]
_FILE = "FILE"


@contextmanager
def trace_errors() -> Iterator[None]:
    """A trace or report file that cannot be read or written, or whose content is wrong, is the user's
    to fix: one line naming it, not a traceback."""
    try:
        yield
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        raise CliError(f"{where}{exc.strerror or exc}") from None
    except ValueError as exc:  # the trace readers' TraceFormatError (path:line: what) and bad option values
        raise CliError(str(exc)) from None


def simulate(
    trace: Annotated[TraceName, typer.Option(
        "--trace", metavar="TRACE",
        help="philly (the Philly job list), bluewaters (Blue Waters' 15,000 jobs with real users and time "
             "limits), accounting (corral's accounting export), sacct (real Slurm's "
             "'sacct -P' output) or openb (the FGD paper's experiment on Alibaba's openb pods).")] = "philly",
    trace_file: Annotated[str | None, typer.Option(
        "--trace-file", metavar=_FILE, show_default=False,
        help="The trace. philly, bluewaters: default the shared traces' copy; accounting and sacct need one.")] = None,
    policies: Annotated[list[str] | None, typer.Option(
        "--policy", metavar="NAME", show_default=False,
        help="A policy to replay, repeatable: fifo-isolated, backfill-isolated (default), backfill-cohort; "
             "openb: fgd+cpu (default), fgd, bestfit.")] = None,
    max_jobs: Annotated[int | None, typer.Option(
        "--max-jobs", metavar="N", min=1, show_default=False, help="Replay only the first N jobs.")] = None,
    seed: Annotated[int, typer.Option(
        "--seed", metavar="N", help="Seed of the time-limit model, for traces without limits.")] = 1,
    nodes: Annotated[int, typer.Option(
        "--nodes", metavar="N", min=1, help="Nodes of the cluster, for traces without one (accounting, sacct).")
    ] = 16,
    gpus_per_node: Annotated[int, typer.Option(
        "--gpus-per-node", metavar="N", min=1, help="GPUs per node of that cluster.")] = 8,
    report: Annotated[str | None, typer.Option(
        "--report", metavar=_FILE, show_default=False, help="Write a self-contained HTML report here.")] = None,
    no_progress: Annotated[bool, typer.Option(
        "--no-progress", help="No progress on stderr (a line rewritten on a terminal, a line per 10 % in logs).")
    ] = False,
    openb_pods: Annotated[str | None, typer.Option(
        "--openb-pods", metavar=_FILE, show_default=False,
        help="openb: the pod list (CSV, or .csv.gz). Default: the trace's openb_pod_list_default.")] = None,
    openb_nodes: Annotated[str | None, typer.Option(
        "--openb-nodes", metavar=_FILE, show_default=False,
        help="openb: the node list. Default: the trace's 1,213 GPU nodes.")] = None,
    seeds: Annotated[str, typer.Option(
        "--seeds", metavar="SEEDS",
        help="openb: arrival-order seeds, e.g. 42-51 or 42,45. Seed 42 replays the FGD authors' recorded order "
             "of the default pod list (another list gets the seeded order, with a note).")] = "42-51",
) -> None:
    """Replay a workload trace through the scheduler under chosen policies; prints a JSON summary and
    can write an HTML report."""
    from corral.sim import cli as sim

    with reported_errors(), trace_errors():
        if trace == "openb":
            summary = sim.simulate_openb(policies or ["fgd+cpu"], seeds, openb_pods, openb_nodes, report)
            for note in dict.fromkeys(n for row in summary["experiments"] for n in row["notes"]):
                warn(f"note: {note}")
        else:
            summary = sim.simulate(trace, trace_file, policies or ["backfill-isolated"], max_jobs, seed, nodes,
                                   gpus_per_node, report, not no_progress)
    typer.echo(json.dumps(summary, indent=1))
