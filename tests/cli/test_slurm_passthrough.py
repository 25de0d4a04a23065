"""`corral slurm CMD ...` runs corral's Slurm command of that name, arguments untouched."""
from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path

CORRAL = Path(sysconfig.get_path("scripts")) / "corral"


def test_corral_slurm_runs_the_named_command() -> None:
    result = subprocess.run([str(CORRAL), "slurm", "srun", "--version"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, "slurm 22.05.8 (corral)\n")


def test_corral_slurm_refuses_an_unknown_command() -> None:
    result = subprocess.run([str(CORRAL), "slurm", "sbash"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "unknown command 'sbash'" in result.stderr
