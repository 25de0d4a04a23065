"""sbatch and `corral submit` read one option table (corral.slurm.sbatch.table) with one getopt
(corral.slurm.common.getopt): an option added there is one edit, and means the same to both."""
import pytest

from corral.cli.submit import CLI_OPTIONS, split_command_line
from corral.jobscript import DirectiveError, build_submission
from corral.jobscript.getopt import parse_args
from corral.jobscript.submission import SBATCH_OPTIONS, SUBMIT_OPTIONS
from corral.slurm.common import getopt
from corral.slurm.sbatch import table
from corral.slurm.sbatch.opts import parse_sbatch

SHARED = [s for s in SUBMIT_OPTIONS if s.option.key in table.JOB]
# A value both front ends take, per option, written so that both store it the same way.
VALUES = {
    "nodes": "2", "ntasks": "4", "ntasks-per-node": "2", "gpus": "a100:2", "gpus-per-node": "2", "gres": "gpu:2",
    "gpus-per-task": "1", "cpus-per-task": "3", "mem": "16G", "mem-per-gpu": "8G", "mem-per-cpu": "1G",
    "time": "1-02:03:04", "partition": "gpu", "job-name": "exp", "output": "o-%j.txt", "error": "e.txt",
    "chdir": "/tmp", "priority": "5", "account": "acct", "qos": "high", "array": "0-3%2",
    "dependency": "afterok:5:6", "signal": "B:USR1@90", "reservation": "r1", "requeue": "expedite",
    "acctg-freq": "task=10", "nodelist": "n[1-2]", "exclude": "n3", "constraint": "ib&h100",
    "container-image": "/images/pytorch.tar", "container-mounts": "/data:/data:ro", "container-workdir": "/work",
    "container-name": "env1", "container-env": "NCCL_DEBUG,HF_HOME",
}


def test_corral_submit_takes_sbatch_s_own_option_objects_and_fields():
    assert {s.option.key for s in SUBMIT_OPTIONS} - set(table.JOB) == set(table.CORRAL_JOB)
    for spec in SHARED:
        assert spec.option is table.BY_KEY[spec.option.key]
        assert spec.field == table.JOB[spec.option.key][2]
    assert SBATCH_OPTIONS is table.OPTIONS
    assert {"wrap", "parsable", "help"} <= {o.key for o in CLI_OPTIONS if table.BY_KEY.get(o.key) is o}


def test_both_front_ends_parse_with_the_one_getopt():
    parsed = parse_args(["-N", "2", "script"], (table.BY_KEY["nodes"],))
    assert isinstance(parsed, getopt.ParsedArgs) and parsed.positionals == ["script"]
    assert isinstance(parsed.options[0], getopt.ParsedOption)


def _sbatch_fields(*args: str) -> dict:
    options, _ = parse_sbatch(["--wrap", "x", *args], {})
    return {k: v for k, v in options.submit.items() if k != "batch"}


@pytest.mark.parametrize("spec", SHARED, ids=lambda s: s.option.key)
def test_every_shared_option_sets_the_same_field_to_the_same_value(spec):
    key = spec.option.key
    if spec.option.arg == getopt.NO_ARG:
        written = [[f"--{key}"]] + ([[f"-{spec.option.short}"]] if spec.option.short else [])
    elif spec.option.arg == getopt.OPTIONAL:  # a value only attaches: `--requeue expedite` is a positional
        written = [[f"--{key}"]] + ([[f"--{key}={VALUES[key]}"]] if key in VALUES else [])
    else:
        value = VALUES[key]
        written = [[f"--{key}={value}"], [f"--{key}", value]]
        written += [[f"-{spec.option.short}", value], [f"-{spec.option.short}{value}"]] if spec.option.short else []
    for args in written:
        from_corral = build_submission([], args)
        assert from_corral == _sbatch_fields(*args), args
        assert spec.field in from_corral, args


@pytest.mark.parametrize("key", sorted(set(table.JOB) - {s.option.key for s in SUBMIT_OPTIONS}))
def test_sbatch_job_options_corral_submit_lacks_are_refused_by_name(key):
    option = table.BY_KEY[key]
    args = [f"--{key}"] if option.arg == getopt.NO_ARG else [f"--{key}=x"]
    with pytest.raises(DirectiveError, match=f"^unsupported option '--{key}' on the command line$"):
        split_command_line([*args, "--wrap", "true"])
