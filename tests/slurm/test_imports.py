"""The Slurm commands must start in a few tens of milliseconds: their modules import no heavy
libraries. Checked in a fresh interpreter (the test process has imported everything already)."""
from __future__ import annotations

import ast
import subprocess
import sys

import pytest

NEVER = {"pydantic", "rich", "typer", "httpx", "fastapi", "sqlalchemy", "click"}
# squeue, sacct, scancel and scontrol's parsers avoid even these (dataclasses alone costs ~12 ms, re
# with enum ~7 ms, collections ~2 ms: corral.slurm takes Mapping and friends from _collections_abc).
AVOIDED = {"dataclasses", "typing", "inspect", "re", "enum", "signal", "collections", "corral.jobscript"}


def imported_by(modules: list[str]) -> set[str]:
    # Printed with repr: json would import `re` itself.
    code = f"import sys\nfor m in {modules!r}: __import__(m)\nprint(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(ast.literal_eval(out))


@pytest.mark.parametrize("modules", [
    ["corral.slurm.squeue.opts", "corral.slurm.squeue.output"],
    ["corral.slurm.sacct.opts", "corral.slurm.sacct.output"],
    ["corral.slurm.scancel.opts", "corral.slurm.scancel.targets"],
    ["corral.slurm.scontrol.opts"],
    ["corral.slurm.common.http", "corral.slurm.common.target", "corral.slurm.common.jsontext"],
    ["corral.slurm.squeue.main"],
    ["corral.slurm.sacct.main"],
    ["corral.slurm.scancel.main"],
    ["corral.slurm.scontrol.main", "corral.slurm.scontrol.actions"],
    ["corral.slurm.sprio.main"],
    ["corral.slurm.sshare.main"],
    ["corral.slurm.sreport.main"],
    ["corral.slurm.sacctmgr.main"],
    ["corral.slurm.sstat.main"],
    ["corral.slurm.dispatch"],
])
def test_fast_paths_import_only_what_they_need(modules):
    loaded = imported_by(modules)
    assert not (NEVER | AVOIDED) & loaded


@pytest.mark.parametrize("modules", [
    ["corral.slurm.sbatch.opts"],
    ["corral.slurm.sinfo.opts", "corral.slurm.sinfo.output"],
    ["corral.slurm.scontrol.output", "corral.slurm.scontrol.show", "corral.slurm.scontrol.job"],
])
def test_no_heavy_libraries(modules):
    assert not NEVER & imported_by(modules)


# The commands talk HTTP and JSON through corral.slurm.common.http and jsontext, never these (~30 ms).
NETWORK = {"json", "http.client", "email", "ssl", "socket", "urllib.request"}


@pytest.mark.parametrize("command", ["sbatch", "squeue", "sacct", "scancel", "scontrol", "sinfo", "sprio", "sshare",
                                     "sreport", "sacctmgr", "sstat", "sattach"])
def test_commands_import_no_heavy_libraries(command):
    loaded = imported_by([f"corral.slurm.{command}.main"])
    assert not (NEVER | NETWORK) & loaded


def test_sbatch_reads_a_submitit_script_without_dataclasses():
    """Every submission starts sbatch: its usual options must not pull in dataclasses and inspect,
    nor `re`, `enum` (signal) or `collections`."""
    script = ("#!/bin/bash\n#SBATCH --cpus-per-task=4\n#SBATCH --gpus-per-node=2\n#SBATCH --mem=16GB\n"
              "#SBATCH --gres=gpu:1\n#SBATCH --time=60\n#SBATCH --array=0-3%2\n#SBATCH --signal=USR2@90\n"
              "#SBATCH --open-mode=append\n#SBATCH --output=/f/%j/%j_0_log.out\n#SBATCH --wckey=submitit\n"
              "#SBATCH --job-name=exp\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\nrun\n")
    code = ("import sys\nfrom corral.slurm.sbatch.opts import apply_script, parse_sbatch\n"
            f"apply_script(parse_sbatch(['--wrap', 'x'], {{}})[0], {script!r}).submit\n"
            "print(sorted(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert not {"dataclasses", "inspect", "typing", "re", "enum", "collections"} & set(ast.literal_eval(out))
