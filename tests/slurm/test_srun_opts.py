"""srun's command line and its defaults from the allocation's environment, as Slurm 22.05's srun reads
them (the warnings' texts were recorded from real srun on this machine, see ../shared/anchors/slurm)."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.srun.opts import parse_srun, resolve_layout

BATCH_ENV = {"SLURM_JOB_ID": "112", "SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_JOB_NUM_NODES": "2",
             "SLURM_NTASKS_PER_NODE": "2"}


def test_options_stop_at_the_command() -> None:
    options = parse_srun(["-l", "-N", "1", "python", "-u", "train.py", "--lr", "1", "-N", "3"], {})
    assert options.command == ("python", "-u", "train.py", "--lr", "1", "-N", "3")
    assert options.label and options.nodes == 1 and options.nodes_given


def test_inside_an_allocation_the_environment_sets_the_defaults() -> None:
    options = parse_srun(["hostname"], BATCH_ENV)
    assert (options.jobid, options.nodes, options.ntasks, options.ntasks_per_node) == (112, 2, 4, 2)
    resolved, warnings = resolve_layout(options, 2)
    assert (resolved.nodes, resolved.ntasks, resolved.ntasks_per_node) == (2, 4, 2) and warnings == []


def test_fewer_tasks_than_nodes_shrinks_the_step_with_slurms_warning() -> None:
    options, warnings = resolve_layout(parse_srun(["-n1", "hostname"], BATCH_ENV), 2)
    assert (options.nodes, options.ntasks) == (1, 1)
    assert warnings == ["srun: Warning: can't run 1 processes on 2 nodes, setting nnodes to 1\n"]


def test_tasks_that_do_not_match_tasks_per_node_drop_it() -> None:
    options, warnings = resolve_layout(parse_srun(["-n3", "-l", "sh"], BATCH_ENV), 2)
    assert (options.nodes, options.ntasks, options.ntasks_per_node) == (2, 3, None)
    assert warnings == ["srun: Warning: can't honor --ntasks-per-node set to 2 which doesn't match the requested "
                        "tasks 3 with the number of requested nodes 2. Ignoring --ntasks-per-node.\n"]


def test_more_nodes_than_allocated_is_refused() -> None:
    with pytest.raises(SlurmCommandError) as error:
        resolve_layout(parse_srun(["-N3", "true"], BATCH_ENV), 2)
    assert error.value.stderr == "srun: error: Only allocated 2 nodes asked for 3\n"


def test_nodelist_is_a_hostlist_and_sets_the_node_count() -> None:
    options, _ = resolve_layout(parse_srun(["-w", "node[1-2]", "--ntasks=2", "true"], {}), None)
    assert options.nodelist == ("node1", "node2") and options.nodes == 2


def test_explicit_nodes_without_tasks_ignore_the_inherited_task_count() -> None:
    options = parse_srun(["-N1", "true"], BATCH_ENV)
    assert options.ntasks is None and options.ntasks_per_node == 2


@pytest.mark.parametrize("argv,message", [
    (["--mpi=pmi2", "true"], "--mpi=pmi2 is not supported by corral"),
    (["--mpi=bogus", "true"], "Invalid MPI type 'bogus', --mpi=list for acceptable types"),  # as real srun
    (["--multi-prog", "tasks.conf"], "--multi-prog is not supported by corral"),
    (["-n", "zero", "true"], 'Invalid numeric value "zero" for --ntasks'),
    (["--input=file.txt", "cat"], "--input=file.txt is not supported"),
    (["--distribution=cyclic", "true"], "--distribution=cyclic is not supported"),
])
def test_what_corral_cannot_do_is_an_error_naming_it(argv, message) -> None:
    with pytest.raises(SlurmCommandError) as error:
        parse_srun(argv, {})
    assert message in error.value.stderr and error.value.stderr.startswith("srun: error: ")


def test_pty_is_a_step_option() -> None:
    assert parse_srun(["--pty", "bash", "-l"], {}).pty is True
    assert parse_srun(["bash", "--pty"], {}).command == ("bash", "--pty")  # the command's own, after it
    assert parse_srun(["bash"], {}).pty is False


def test_advisory_options_warn() -> None:
    options = parse_srun(["--cpu-bind=q", "--unbuffered", "--mpi=none", "true"], {})
    assert options.warnings == ("srun: warning: --cpu-bind is ignored by corral: corral does not bind tasks "
                                "to CPUs\n",)


def test_a_bare_exclusive_shapes_a_new_allocation() -> None:
    # --exclusive takes an optional value: without one it was dropped, and srun's job shared its nodes.
    assert parse_srun(["--exclusive", "hostname"], {}).job == {"exclusive": True}
    assert parse_srun(["--exclusive", "-N1", "--pty", "bash"], {}).job == {"exclusive": True}
    assert "exclusive" not in parse_srun(["hostname"], {}).job


def test_job_options_for_a_new_allocation() -> None:
    options = parse_srun(["-p", "gpu", "-t", "10", "--gpus-per-node=1", "-N2", "hostname"], {})
    assert options.job == {"partition": "gpu", "time_limit_s": 600, "gpus_per_node": 1}
    assert options.jobid is None


def test_a_gpu_share_for_a_new_allocation() -> None:
    assert parse_srun(["--gres=mps:30", "hostname"], {}).job == {"gpus_per_node": 1, "gpu_share": "mps:30"}
    with pytest.raises(SlurmCommandError) as error:
        parse_srun(["--gres=shard:2", "--gpus=1", "hostname"], {})
    assert error.value.stderr.startswith("srun: error: Batch job submission failed: Invalid generic resource "
                                         "(gres) specification: --gpus and --gres=shard cannot be combined")


def test_unknown_option_exits_as_real_srun() -> None:
    with pytest.raises(SlurmCommandError) as error:
        parse_srun(["--bogus"], {})
    # Recorded from real srun 22.05 (which names itself by its argv[0]).
    assert (error.value.stderr, error.value.exit_code) == (
        "srun: unrecognized option '--bogus'\nTry \"srun --help\" for more information\n", 255)
