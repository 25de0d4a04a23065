"""`corral-slurm COMMAND [ARGS...]`: corral's Slurm commands under one name, for machines that also
have real Slurm's sbatch, squeue, ... on PATH (`corral-slurm squeue -u me`)."""
from __future__ import annotations

import sys
from _collections_abc import Sequence

COMMANDS = ("sacct", "sacctmgr", "salloc", "sattach", "sbatch", "scancel", "scontrol", "sinfo", "sprio", "squeue",
            "sreport", "srun", "sshare", "sstat")
USAGE = f"Usage: corral-slurm {{{','.join(COMMANDS)}}} [ARGS...]\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        (sys.stdout if args else sys.stderr).write(USAGE)
        return 0 if args else 1
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        sys.stderr.write(f"corral-slurm: error: unknown command {name!r}\n{USAGE}")
        return 1
    # Only the chosen command's module is imported: each costs start-up time.
    module = __import__(f"corral.slurm.{name}.main", fromlist=["main"])
    return module.main(rest)
