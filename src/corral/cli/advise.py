"""`corral advise`: what this cluster (or one account) should run, from its own accounting. It reads the
history over the REST API, sums it up (cli/advise_summary.py), replays it through the simulator here, in
this process, under the live configuration and variations of it (sim/whatif.py), and recommends a change
only where the replay shows it pays."""
from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from corral.cli.errors import CliError
from corral.cli.jobs import UrlOption
from corral.cli.output import print_json, print_table, reported_errors
from corral.cli.timespec import FORMS_HELP, parse_when

WHATIF_HEADERS = ("SCENARIO", "JOBS", "NOT-RUN", "MEAN-WAIT", "P90-WAIT", "UTILISATION", "REPLAY")


def advise(
    since: Annotated[str, typer.Option("--since", "-S", metavar="TIME",
                                       help=f"Start of the history to read: {FORMS_HELP}.")] = "7d",
    account: Annotated[str | None, typer.Option("--account", "-A", show_default=False,
                                                help="Advise for this account's jobs (the replays still run "
                                                     "every job: the account shares the cluster).")] = None,
    max_jobs: Annotated[int, typer.Option("--max-jobs", metavar="N", min=1,
                                          help="Replay at most the newest N finished jobs.")] = 20_000,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON: the summary, the what-ifs and "
                                              "the recommendations.")] = False,
    url: UrlOption = None,
) -> None:
    """What this cluster (or account) should run, from its own accounting: job mix, waits, GPU utilisation,
    idle GPUs, quota borrowing; then its finished jobs replayed through the simulator under the live
    configuration and under variations of it (cohort lending, placement, tighter time limits), with a
    recommendation only where a variation lowers the mean wait by 20 % or more."""
    from corral.cli.connect import open_client

    with reported_errors():
        now = time.time()
        since_s = parse_when(since, now)
        if since_s >= now:
            raise CliError(f"--since {since!r} is not in the past")
        with open_client(url, timeout_s=60.0) as client:
            # No time before the cluster began counts: its GPUs did not exist then.
            began = client.health().get("created_at")
            since_s = max(since_s, began) if began is not None else since_s
            records = client.accounting(since=since_s)
            live = {"nodes": client.nodes(), "partitions": client.partitions(), "tenancy": client.tenancy(),
                    "scheduler": client.scheduler()}
        report = build_report(records, live, since_s, now, account, max_jobs, progress=not json_output)
    if json_output:
        print_json(report)
    else:
        print_report(report)


def build_report(records: list[dict], live: dict[str, Any], since: float, now: float, account: str | None,
                 max_jobs: int, progress: bool = False) -> dict[str, Any]:
    from corral.cli.advise_summary import summarize
    from corral.sim import whatif

    if account is not None:
        mine = [r for r in records if r.get("account") == account]
    else:
        mine = records
    if not any(r.get("end_time") is not None and r.get("start_time") is not None for r in mine):
        whose = f" of account {account}" if account else ""
        raise CliError(f"no finished jobs{whose} since {_when(since)}: nothing to advise on yet")
    capacity = sum(len(n["gpus"]) for n in live["nodes"])
    summary = summarize(mine, since, now, capacity, live["tenancy"].get("queues", []))
    setup = whatif.live_setup(live["partitions"], live["scheduler"], live["tenancy"], live["nodes"])
    jobs, notes = whatif.history_jobs(records, max_jobs)
    if not jobs:
        raise CliError(f"no finished job since {_when(since)} can be replayed: {'; '.join(notes)}")
    rows, advice, problem = _what_ifs(whatif, setup, jobs, capacity, account, progress)
    advice += _idle_advice(summary)
    evidence = {"jobs": len(jobs), "account": account, "from": jobs[0].submit_time, "to": max(j.end_time for j in jobs),
                "nodes": len(setup.nodes), "gpus": capacity, "notes": notes + [
                    "replayed from an empty cluster on today's nodes, partitions, tenancy and scheduler settings; "
                    "each job runs as long as it really ran; compare 'actual' with 'baseline' to judge the replay"]}
    return {"summary": summary, "whatif": {"evidence": evidence, "scenarios": rows, "fidelity_problem": problem},
            "recommendations": advice,
            "thresholds": {"mean_wait_lower_by": whatif.IMPROVEMENT, "min_baseline_mean_wait_s": whatif.MIN_WAIT_S}}


def _what_ifs(whatif, setup, jobs, capacity: int, account: str | None, progress: bool):
    actual = whatif.real_figures(jobs, capacity, account)
    rows: list[dict[str, Any]] = [{"key": "actual", "title": "what the jobs really waited and used", "change": None,
                                   **actual.to_dict(), "replay_s": None}]
    advice: list[str] = []
    with _status("replaying the live configuration", progress):
        baseline = whatif.replay(setup, jobs, account)
    rows.append(_row("baseline", "the live configuration replayed", None, baseline))
    problem = whatif.coverage_problem(len(jobs), baseline) or whatif.fidelity_problem(actual, baseline.figures)
    for variation in whatif.variations(setup, jobs):
        with _status(f"replaying {variation.title}", progress):
            outcome = whatif.replay(variation.setup(setup), jobs, account, variation.limits)
        rows.append(_row(variation.key, variation.title, variation.change, outcome))
        line = whatif.recommend(baseline, variation, outcome)
        if line is not None and problem is None:
            advice.append(line)
    return rows, advice, problem


def _row(key: str, title: str, change: str | None, outcome) -> dict[str, Any]:
    return {"key": key, "title": title, "change": change, **outcome.figures.to_dict(),
            "refused": outcome.refused, "unfinished": outcome.unfinished, "replay_s": round(outcome.wall_s, 2)}


# Idle GPUs are worth acting on when jobs the controller flagged held this share of the allocated GPU-hours.
IDLE_SHARE = 0.05


def _idle_advice(summary: dict[str, Any]) -> list[str]:
    idle = summary["idle"]
    allocated = summary["utilisation"]["gpu_hours"]
    if not allocated or idle["flagged_gpu_hours"] < IDLE_SHARE * allocated:
        return []
    users = ", ".join(dict.fromkeys(row["user"] for row in idle["top"] if row["flagged"]))
    return [f"idle GPUs: {idle['flagged_jobs']} job(s) flagged idle held {idle['flagged_gpu_hours']:.1f} of "
            f"{allocated:.1f} GPU-hours ({100 * idle['flagged_gpu_hours'] / allocated:.0f} %) with their GPUs "
            f"under 5 % (most: {users}). Change: gpu_idle_cancel_s (e.g. 3600) cancels such jobs"]


def print_report(report: dict[str, Any]) -> None:
    from corral.cli import render_advice

    for line in render_advice.summary_lines(report["summary"]):
        _echo_block(line)
    evidence = report["whatif"]["evidence"]
    typer.echo(f"\nWhat-ifs: {evidence['jobs']} finished jobs submitted {_when(evidence['from'])} to "
               f"{_when(evidence['to'])} replayed on {evidence['nodes']} node(s), {evidence['gpus']} GPUs"
               + (f"; waits of account {evidence['account']}'s jobs" if evidence["account"] else ""))
    print_table(WHATIF_HEADERS, render_advice.whatif_rows(report["whatif"]["scenarios"]), frozenset({1, 2, 3, 4, 5, 6}))
    for note in evidence["notes"]:
        typer.echo(f"  note: {note}")
    typer.echo("\nRecommendations:")
    problem = report["whatif"]["fidelity_problem"]
    if problem is not None:
        typer.echo(f"  none from the what-ifs: {problem}")
    elif not report["recommendations"]:
        thresholds = report["thresholds"]
        typer.echo(f"  nothing to change: no variation lowered the mean wait by "
                   f"{100 * thresholds['mean_wait_lower_by']:.0f} % or more (on a baseline mean wait of at "
                   f"least {thresholds['min_baseline_mean_wait_s']:.0f} s), and idle GPUs are under "
                   f"{100 * IDLE_SHARE:.0f} % of the allocated GPU-hours")
    for line in report["recommendations"]:
        typer.echo(f"  - {line}")


def _echo_block(block) -> None:
    if isinstance(block, str):
        typer.echo(block)
    else:
        headers, rows, right = block
        print_table(headers, rows, right)


def _when(epoch: float) -> str:
    from corral.cli.render_advice import when  # with the simulator, as the summary loads it: not at start-up

    return when(epoch)


@contextmanager
def _status(text: str, shown: bool) -> Iterator[None]:
    """A spinner on stderr while a replay runs (on a terminal only: nothing in logs or with --json)."""
    if not (shown and sys.stderr.isatty()):
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(text):
        yield

