"""sbatch --export -> the job's environment."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch.export import job_environment

SUBMITTER = {"PATH": "/bin", "FOO": "foo", "SLURM_JOB_ID": "9", "SLURMD_NODENAME": "n1", "SBATCH_PARTITION": "p",
             "SRUN_DEBUG": "1", "CORRAL_SECRET": "s", "CORRAL_URL": "http://c"}


@pytest.mark.parametrize(("export", "env"), [
    (None, {"PATH": "/bin", "FOO": "foo", "CORRAL_URL": "http://c"}),
    ("ALL", {"PATH": "/bin", "FOO": "foo", "CORRAL_URL": "http://c"}),
    ("all,BAR=1,X=a=b", {"PATH": "/bin", "FOO": "foo", "CORRAL_URL": "http://c", "BAR": "1", "X": "a=b"}),
    ("NONE", {}),
    ("FOO,BAR=2,MISSING", {"FOO": "foo", "BAR": "2"}),
    ("NONE,BAR=2", {"BAR": "2"}),
    ("SLURM_JOB_ID", {"SLURM_JOB_ID": "9"}),  # named: it travels
])
def test_export(export, env):
    assert job_environment(export, SUBMITTER) == env


@pytest.mark.parametrize("export", ["ALL,NONE", "=x"])
def test_bad_exports(export):
    with pytest.raises(SlurmCommandError) as caught:
        job_environment(export, SUBMITTER)
    assert caught.value.exit_code == 1 and caught.value.stderr.startswith("sbatch: error: ")
