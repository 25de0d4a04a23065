"""Issue 10's bad inputs at the Slurm commands: corral.limits' bounds, refused the way sbatch, srun
and scontrol refuse a bad value (their `<prog>: error:` lines and exit statuses), never a traceback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from corral import limits
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch.opts import apply_script, parse_sbatch
from corral.slurm.scontrol.opts import parse_scontrol
from corral.slurm.scontrol.update import update
from corral.slurm.srun.opts import parse_srun

HUGE = "99999999999999999999"


def sbatch_error(argv, directives=""):
    with pytest.raises(SlurmCommandError) as caught:
        options, source = parse_sbatch(argv, {})
        apply_script(options, source.text if source.kind == "wrap" else f"#!/bin/sh\n{directives}\ntrue\n")
    return caught.value.stderr, caught.value.exit_code


@pytest.mark.parametrize(("argv", "directives"), [
    (["--priority", HUGE, "--wrap", "true"], ""),
    (["job.sh"], f"#SBATCH --priority={HUGE}"),
])
def test_sbatch_priority_past_the_limit_stops_as_sbatch_does(argv, directives):
    assert sbatch_error(argv, directives) == (f"sbatch: error: Priority must be < {limits.PRIORITY_MAX + 1}\n", 255)


@pytest.mark.parametrize(("argv", "stderr", "code"), [
    (["-n", HUGE], f"sbatch: error: Numeric argument ({HUGE}) to big for --ntasks: corral's limit is "
                   f"{limits.COUNT_MAX}.\n", 1),
    (["-n", "\u00b2"], 'sbatch: error: Invalid numeric value "\u00b2" for --ntasks.\n', 1),
    (["-N", HUGE], f'sbatch: error: "{HUGE}" is not a valid node count: corral\'s limit is {limits.COUNT_MAX}\n', 255),
    (["-t", HUGE], "sbatch: error: Invalid --time specification: longer than the longest time limit corral takes, "
                   f"{limits.TIME_LIMIT_S_MAX} seconds (about 68 years)\n", 255),
    (["--mem", f"{HUGE}T"], "sbatch: error: Invalid --mem specification: more than the largest memory size corral "
                            f"takes, {limits.MEM_MIB_MAX} MiB (2 PiB)\n", 255),
    (["--gres", f"gpu:{HUGE}"], "sbatch: error: Invalid generic resource (gres) specification: "
                                f"{HUGE} is more than corral's limit, {limits.COUNT_MAX}\n", 1),
])
def test_sbatch_numbers_past_the_limits_name_the_option_and_the_limit(argv, stderr, code):
    assert sbatch_error([*argv, "--wrap", "true"]) == (stderr, code)


def test_sbatch_unterminated_quote_stops_like_sbatch_without_a_traceback(tmp_path):
    script = tmp_path / "job.sh"
    script.write_text('#!/bin/sh\n#SBATCH -N 1\n#SBATCH --job-name="abc\necho hi\n')
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from corral.slurm.sbatch.main import main; sys.exit(main())",
         str(script)], capture_output=True, text=True, env={**os.environ, "CORRAL_URL": "http://127.0.0.1:9"})
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == 'sbatch: fatal: job.sh: line 3: Unmatched `"` in [ --job-name="abc]\n'


@pytest.mark.parametrize(("argv", "message"), [
    (["-w", "node[1-"], "srun: error: Invalid node name specified: unbalanced '[' in hostlist 'node[1-'\n"),
    (["-w", "node[1-100000000]"], f"srun: error: Invalid node name specified: hostlist 'node[1-100000000]' names "
                                  f"more than {limits.LIST_MAX_ITEMS} hosts\n"),
])
def test_srun_refuses_values_out_of_range(argv, message):
    with pytest.raises(SlurmCommandError) as caught:
        parse_srun([*argv, "true"], {})
    assert caught.value.stderr == message


class NoController:
    """scontrol must refuse before it asks the controller anything."""

    def __getattr__(self, name):
        raise AssertionError(f"scontrol called the controller ({name}) for an invalid value")


@pytest.mark.parametrize(("argv", "message"), [
    (["update", "JobId=1", f"Priority={HUGE}"],
     f"scontrol: error: Invalid Priority value: {HUGE} (corral's priorities are 0 to {limits.PRIORITY_MAX})\n"),
    (["update", "NodeName=node[1-", "State=DRAIN", "Reason=x"],
     "scontrol: error: Invalid node name specified: unbalanced '[' in hostlist 'node[1-'\n"),
])
def test_scontrol_update_refuses_values_out_of_range(argv, message):
    with pytest.raises(SlurmCommandError) as caught:
        update(parse_scontrol(argv), NoController())
    assert (caught.value.stderr, caught.value.exit_code) == (message, 1)
