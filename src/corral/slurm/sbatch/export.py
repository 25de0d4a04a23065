"""The environment a batch job gets from sbatch's --export (or SBATCH_EXPORT), as a JobSubmit `env`.

- ALL (the default): the submitter's environment;
- NONE: nothing (Slurm then loads the user's login environment on the node; corral's agent gives
  the job its own variables and a default PATH only: agent/environment.py);
- `ALL,K=V,NAME`: everything, plus K=V; `K=V,NAME` without ALL: only those (NAME: its value in
  the submitter's environment, when set).
Whatever the mode, the submitter's own Slurm variables (SLURM_*, SLURMD_*, SBATCH_*, SRUN_*) and
the cluster secret stay behind, for `corral submit` too (it submits through sbatch's batch_job): a
job that submits another would otherwise hand it stale SLURM_NTASKS, SLURM_JOB_ID, ... (Slurm itself passes
SLURM_* on and lets the job's own values win; corral's agent sets the job's from scratch)."""
from __future__ import annotations

from _collections_abc import Mapping

from corral.slurm.common.errors import SlurmCommandError

PRIVATE_VARIABLES = frozenset({"CORRAL_SECRET"})
PRIVATE_PREFIXES = ("SLURM_", "SLURMD_", "SBATCH_", "SRUN_")


def travels(name: str) -> bool:
    return name not in PRIVATE_VARIABLES and not name.startswith(PRIVATE_PREFIXES)


def job_environment(export: str | None, environ: Mapping[str, str]) -> dict[str, str]:
    items = [item for item in (export or "ALL").split(",") if item]
    modes = {item.upper() for item in items if "=" not in item and item.upper() in ("ALL", "NONE")}
    if modes == {"ALL", "NONE"}:
        raise SlurmCommandError("sbatch: error: --export: ALL and NONE exclude each other\n", 1)
    env = {k: v for k, v in environ.items() if travels(k)} if "ALL" in modes else {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq and name.upper() in ("ALL", "NONE"):
            continue
        if not name:
            raise SlurmCommandError(f"sbatch: error: Invalid --export specification: {export}\n", 1)
        if eq:
            env[name] = value  # named explicitly: it travels even if it looks like a Slurm variable
        elif name in environ:
            env[name] = environ[name]
    return env
