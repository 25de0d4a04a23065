"""The Slurm commands must start in a few tens of milliseconds: their modules import no heavy
libraries. Checked in a fresh interpreter (the test process has imported everything already)."""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

NEVER = {"pydantic", "rich", "typer", "httpx", "fastapi", "sqlalchemy", "click"}
# squeue, sacct, scancel and scontrol's parsers avoid even these (dataclasses alone costs ~12 ms).
AVOIDED = {"dataclasses", "typing", "inspect", "re", "signal", "corral.jobscript"}


def imported_by(modules: list[str]) -> set[str]:
    # Printed with repr: json would import `re` itself.
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(ast.literal_eval(out))


@pytest.mark.parametrize("modules", [
    ["corral.slurm.squeue_opts", "corral.slurm.squeue"],
    ["corral.slurm.sacct_opts", "corral.slurm.sacct"],
    ["corral.slurm.scancel_opts", "corral.slurm.scancel"],
    ["corral.slurm.scontrol_opts"],
])
def test_fast_paths_import_only_what_they_need(modules):
    loaded = imported_by(modules)
    assert not (NEVER | AVOIDED) & loaded


@pytest.mark.parametrize("modules", [
    ["corral.slurm.sbatch_opts"],
    ["corral.slurm.sinfo_opts", "corral.slurm.sinfo"],
    ["corral.slurm.scontrol", "corral.slurm.scontrol_show", "corral.slurm.scontrol_job"],
])
def test_no_heavy_libraries(modules):
    assert not NEVER & imported_by(modules)
