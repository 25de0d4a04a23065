"""What stopping `corral up` does to the cluster's jobs: first the controller stops them (requeued, or
ended) while the agents still run, and one line says what happened; once the agents and the controller are
gone, whatever an agent that died left running is killed (its spool records it)."""
from __future__ import annotations

import typer

from corral.cli.client import Client
from corral.cli.errors import CliError
from corral.cli.up_plan import UpPlan

# How long stopping waits for the jobs' tasks to be reported gone (the controller waits at most its kill
# grace plus its report timeout); past it, the agents kill what is left as they stop.
STOP_JOBS_WAIT_S = 120.0


def stop_cluster_jobs(plan: UpPlan, controller_alive: bool) -> None:
    """Have the controller stop every running job, and say in one line what became of them."""
    if not controller_alive:
        typer.echo("corral: the controller is gone: running jobs are killed with the agents and end "
                   "NODE_FAIL at the next 'corral up'", err=True)
        return
    try:
        ca_file = str(plan.ca_file) if plan.ca_file else None
        urls = plan.urls or (plan.url,)  # the leader stops them
        with Client(urls, plan.secret_file.read_text().strip(), timeout_s=10.0, ca_file=ca_file) as client:
            report = client.stop_cluster(STOP_JOBS_WAIT_S)
    except (CliError, OSError) as exc:
        typer.echo(f"corral: could not stop the jobs through the controller ({exc}): the agents kill "
                   "their tasks as they stop", err=True)
        return
    typer.echo(f"corral: {stop_summary(report)}", err=True)


def stop_summary(report: dict) -> str:
    """One line on what stopping did to the jobs, from the controller's ClusterStopOut."""
    ended: dict[str, int] = {}
    for job in report["ended"]:
        ended[job["state"]] = ended.get(job["state"], 0) + 1
    parts = []
    if report["requeued"]:
        parts.append(f"{_jobs(len(report['requeued']), 'running job')} requeued")
    parts += [f"{count} ended {state}" for state, count in sorted(ended.items())]
    if report["unconfirmed"]:
        parts.append(f"{len(report['unconfirmed'])} not reported stopped in time (killed with the agents)")
    line = "stopping: " + (", ".join(parts) if parts else "no running jobs")
    pending = report["pending"]
    if pending:
        line += f"; {_jobs(pending, 'pending job')} {'stays' if pending == 1 else 'stay'} queued"
    if report["requeued"] or pending:
        line += "; the next 'corral up' runs them"
    return line


def _jobs(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def kill_leftover_tasks(plan: UpPlan) -> None:
    """Kill what an agent that died (SIGKILL, a crash) left running; its spool records its tasks."""
    from corral.agent.task_spool import TaskSpool, sweep  # psutil: only when stopping

    for node, spool_dir in zip(plan.node_names, plan.spool_dirs, strict=True):
        killed, survivors = sweep(TaskSpool(spool_dir))
        if killed:
            typer.echo(f"corral: killed the leftover tasks of {', '.join(r.describe() for r in killed)} on "
                       f"{node}, whose agent was gone", err=True)
        if survivors:
            typer.echo(f"corral: warning: the tasks of {', '.join(r.describe() for r in survivors)} on {node} "
                       "outlived SIGKILL", err=True)
