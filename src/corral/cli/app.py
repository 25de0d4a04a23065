"""The `corral` command's Typer app (corral.cli.main starts it, after the lean commands decline); heavy
imports (httpx, rich, psutil, pynvml) wait for the commands that need them."""
from __future__ import annotations

from typing import Annotated

import typer

from corral.cli import jobs, scheduling
from corral.cli.advise import advise
from corral.cli.agent_cmds import agent_app
from corral.cli.auth_cmds import audit, token_app
from corral.cli.gateway_cmd import gateway
from corral.cli.helpstyle import CorralApp, CorralCommand
from corral.cli.logs import logs
from corral.cli.notebook import notebook
from corral.cli.ray_cluster import ray
from corral.cli.services import service_app
from corral.cli.simulate import simulate
from corral.cli.status import status
from corral.cli.tenancy import reservation_app, tenancy_app
from corral.cli.up import up

_RAW_ARGS = "corral.raw_args"


class RawArgsCommand(CorralCommand):
    """Hands its arguments to the command untouched: sbatch's option rules are not click's (long
    prefixes, options ending at the script, a `--` that must stay visible)."""

    def parse_args(self, ctx, args):  # noqa: ANN001, ANN201 - click's signature
        ctx.meta[_RAW_ARGS] = list(args)
        return super().parse_args(ctx, [])


app = CorralApp(
    name="corral",
    help="corral: a GPU cluster workload manager with Slurm's ways. Start one with 'corral up'. "
         "'corral submit' is sbatch: its script runs once, and the srun lines in it start the tasks. "
         "'corral run' is srun: it runs a command as every task and shows their output.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,  # tracebacks with locals could print the cluster secret
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"corral {version('corral')}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                               help="Print corral's version and exit.")] = False,
) -> None:
    pass


app.command("up")(up)


@app.command(
    "submit",
    cls=RawArgsCommand,
    add_help_option=False,
    help="Submit a batch job (sbatch): the script or command runs once, on the first node; srun lines "
         "in it start the tasks. 'corral submit --help' lists the options.",
)
def submit(ctx: typer.Context) -> None:
    from corral.cli.submit import run_submit

    run_submit(ctx.meta[_RAW_ARGS])


@app.command(
    "run",
    cls=RawArgsCommand,
    add_help_option=False,
    help="Run a command as every task of a new job (srun), each task with its own RANK and "
         "CUDA_VISIBLE_DEVICES; output shown here, exit status the tasks'. 'corral run --help' lists the options.",
)
def run_command(ctx: typer.Context) -> None:
    from corral.cli.run import run_tasks

    raise typer.Exit(run_tasks(ctx.meta[_RAW_ARGS]))


@app.command(
    "slurm",
    cls=RawArgsCommand,
    add_help_option=False,
    help="Run one of corral's Slurm commands (sbatch, srun, salloc, squeue, sacct, sstat, scancel, scontrol, "
         "sinfo, sprio, sshare, sreport, sacctmgr) under this name, for machines that also have real Slurm on "
         "PATH: 'corral slurm squeue -u me'.",
)
def slurm(ctx: typer.Context) -> None:
    from corral.slurm.dispatch import main as dispatch

    raise typer.Exit(dispatch(ctx.meta[_RAW_ARGS]))


app.command("queue")(jobs.queue)
app.command("show")(jobs.show)
app.command("logs")(logs)
app.command("cancel")(jobs.cancel)
app.command("nodes")(jobs.nodes)
app.command("acct")(jobs.acct)
app.command("requeue")(scheduling.requeue)
app.command("hold")(scheduling.hold)
app.command("release")(scheduling.release)
app.command("prio")(scheduling.prio)
app.command("share")(scheduling.share)
app.command("queues")(scheduling.queues)
app.command("simulate")(simulate)
app.command("advise")(advise)
app.add_typer(tenancy_app, name="tenancy")
app.add_typer(reservation_app, name="reservation")
app.add_typer(service_app, name="service")
app.add_typer(token_app, name="token")
app.add_typer(agent_app, name="agent")
app.command("audit")(audit)
app.command("status")(status)
app.command("gateway")(gateway)
app.command("notebook")(notebook)
app.command("ray")(ray)
