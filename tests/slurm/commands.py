"""Running corral's Slurm commands as their console scripts, against a real controller.

The scripts are called by absolute path (this environment's scripts directory, `.venv/bin`): real
Slurm's commands in /usr/bin have the same names, and must never be picked by mistake."""
from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

import pytest

SCRIPTS = Path(sysconfig.get_path("scripts"))
COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "sprio", "srun", "salloc", "sattach",
            "corral-slurm")


class Result:
    def __init__(self, proc: subprocess.CompletedProcess) -> None:
        self.stdout, self.stderr, self.code = proc.stdout, proc.stderr, proc.returncode

    def __repr__(self) -> str:
        return f"Result(code={self.code}, stdout={self.stdout!r}, stderr={self.stderr!r})"


def script(name: str) -> Path:
    path = SCRIPTS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: install the console scripts with `pip install -e .` (make venv)")
    return path


def command_env(url: str, secret_file: Path | str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SBATCH_", "SQUEUE_"))}
    return {**env, "CORRAL_URL": url, "CORRAL_SECRET_FILE": str(secret_file), **extra}


def run(name: str, *args: str, env: dict[str, str], stdin: str | None = None, cwd: Path | None = None) -> Result:
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    proc = subprocess.run([str(script(name)), *args], env=env, capture_output=True, text=True, cwd=cwd,
                          timeout=60, check=False, **feed)
    return Result(proc)


class Commands:
    """The commands, bound to one cluster: `cmd.sbatch("--wrap", "true")`."""

    def __init__(self, cluster, workdir: Path) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.env = command_env(cluster.url, cluster.secret_file)

    def __call__(self, name: str, *args: str, stdin: str | None = None, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> Result:
        return run(name, *args, env={**self.env, **(env or {})}, stdin=stdin, cwd=cwd or self.workdir)

    def submit(self, *args: str, stdin: str | None = None) -> int:
        """sbatch --parsable ARGS -> the job id (the call must succeed)."""
        result = self("sbatch", "--parsable", *args, stdin=stdin)
        assert result.code == 0 and result.stderr == "", result
        return int(result.stdout)
