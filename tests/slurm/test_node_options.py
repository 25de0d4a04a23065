"""Node options are hostlists, read as the options are: a malformed or too large one stops the
command with a Slurm-like error before the controller is asked anything (and no name is made)."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.scancel.opts import parse_scancel
from corral.slurm.scontrol.opts import parse_scontrol
from corral.slurm.scontrol.output import scontrol_show_output
from corral.slurm.sinfo.opts import parse_sinfo
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.srun.opts import parse_srun
from tests.e2e.harness import free_port

from .commands import command_env, run

HUGE = "n[1-100000000]"
TOO_MANY = f"hostlist '{HUGE}' names more than 65536 hosts"


@pytest.mark.parametrize(("parse", "argv", "message"), [
    (parse_squeue, ["-w", HUGE], f"squeue: error: invalid entry for --nodelist: {TOO_MANY}\n"),
    (parse_sacct, ["-N", HUGE], f"sacct: error: invalid entry for --nodelist: {TOO_MANY}\n"),
    (parse_sinfo, ["-n", HUGE], f"sinfo: error: invalid entry for --nodes: {TOO_MANY}\n"),
    (parse_scancel, ["-w", HUGE], f"scancel: error: invalid entry for --nodelist: {TOO_MANY}\n"),
    (parse_srun, ["-w", HUGE, "true"], f"srun: error: Invalid node name specified: {TOO_MANY}\n"),
    (parse_srun, ["-x", "n[1-", "true"],
     "srun: error: Invalid node name specified: unbalanced '[' in hostlist 'n[1-'\n"),
    (parse_squeue, ["-w", "n[2-1]"],
     "squeue: error: invalid entry for --nodelist: descending range '2-1' in hostlist 'n[2-1]'\n"),
])
def test_bad_node_options_stop_the_command(parse, argv, message) -> None:
    with pytest.raises(SlurmCommandError) as caught:
        parse(argv, {})
    assert (caught.value.stderr, caught.value.exit_code) == (message, 1)
    parse(["n[1-2]" if a in (HUGE, "n[1-", "n[2-1]") else a for a in argv], {})  # a good list passes


def test_scontrol_show_hostlist_says_a_list_is_invalid() -> None:
    command = parse_scontrol(["show", "hostlist", HUGE])
    assert scontrol_show_output(command) == ("", f"Invalid hostlist: {HUGE}\n", 0)


def test_the_command_fails_before_asking_the_controller(tmp_path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("s")
    result = run("squeue", "-w", HUGE, env=command_env(f"http://127.0.0.1:{free_port()}", secret))
    assert (result.code, result.stdout) == (1, "")
    assert result.stderr == f"squeue: error: invalid entry for --nodelist: {TOO_MANY}\n"
