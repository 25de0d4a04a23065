"""Node options of the Slurm commands (`squeue -w`, `sacct -N`, `sinfo -n`, `scancel -w`, `srun -w/-x`):
checked as the options are read, as Slurm's commands do (hostset_create), so that a malformed or
too large hostlist stops the command with an error before it asks the controller anything."""
from __future__ import annotations

from corral import hostlist
from corral.slurm.common.errors import SlurmCommandError


def expand_option(prog: str, option: str, expression: str) -> list[str]:
    """The names of `expression`, or `<prog>: error: invalid entry for <option>: <why>` (exit 1)."""
    try:
        return hostlist.expand(expression)
    except hostlist.HostlistError as exc:
        raise SlurmCommandError(f"{prog}: error: invalid entry for {option}: {exc}\n", 1) from None


def checked_option(prog: str, option: str, expression: str | None) -> str | None:
    """`expression` unchanged once it is known to expand (None passes)."""
    if expression is not None:
        expand_option(prog, option, expression)
    return expression
