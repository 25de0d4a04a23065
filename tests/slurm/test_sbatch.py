"""sbatch: command line, SBATCH_* variables and #SBATCH lines -> submission fields (table tests)."""
from __future__ import annotations

import pytest

from corral.slurm.common import jobids
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sbatch.opts import (
    ScriptSource,
    apply_script,
    check_batch_script,
    parse_sbatch,
    submitted_line,
    wrap_script,
)
from corral.slurm.sbatch.values import parse_signal_spec

SCRIPT = "#!/bin/bash\n{}\nsrun python train.py\n"


def job_fields(options):
    """The submission minus `batch`, which sbatch always sets."""
    fields = dict(options.submit)
    assert fields.pop("batch") is True
    return fields


def submit(argv, env=None, directives=""):
    options, source = parse_sbatch(argv, env or {})
    text = source.text if source.kind == "wrap" else SCRIPT.format(directives)
    return apply_script(options, text)


@pytest.mark.parametrize(("argv", "fields"), [
    (["-N2", "-n", "8", "-c", "4"], {"nodes": 2, "ntasks": 8, "cpus_per_task": 4}),
    (["--nodes=2-4"], {"nodes": 2}),
    (["--ntasks-per-node=4"], {"ntasks_per_node": 4}),
    (["--tasks-per-node", "4"], {"ntasks_per_node": 4}),  # Ray's spelling
    (["--gpus-per-node=a100:2"], {"gpus_per_node": 2, "gpu_model": "a100"}),
    (["--gres=gpu:h100:2", "--gpus-per-task=h100:1"], {"gpus_per_node": 2, "gpus_per_task": 1, "gpu_model": "h100"}),
    (["--gres=gpu:h100:2", "--gpus-per-task=H100:1"], {"gpus_per_node": 2, "gpus_per_task": 1, "gpu_model": "h100"}),
    (["--gres=gpu:4"], {"gpus_per_node": 4}),
    (["--gres=shard:2"], {"gpus_per_node": 1, "gpu_share": "shard:2"}),
    (["--gres=shard:h100:2"], {"gpus_per_node": 1, "gpu_share": "shard:2", "gpu_model": "h100"}),
    (["--gres=mps:50"], {"gpus_per_node": 1, "gpu_share": "mps:50"}),
    (["-G", "8"], {"gpus": 8}),
    (["--gpus-per-task=1"], {"gpus_per_task": 1}),
    (["--mem=16GB"], {"mem_mib": 16384}),
    (["--mem-per-cpu=500"], {"mem_per_cpu_mib": 500}),
    (["--mem-per-gpu=8g"], {"mem_per_gpu_mib": 8192}),
    (["-t", "60"], {"time_limit_s": 3600}),
    (["--time=1-00:00:00"], {"time_limit_s": 86400}),
    (["-J", "exp", "-p", "gpu", "-o", "/f/%j.out", "-e", "/f/%j.err", "-D", "/work"],
     {"name": "exp", "partition": "gpu", "output": "/f/%j.out", "error": "/f/%j.err", "workdir": "/work"}),
    (["--array=0-4%3"], {"array": "0-4%3"}),
    (["--dependency=afterok:12:13,afterany:14"], {"dependency": "afterok:12:13,afterany:14"}),
    (["--dependency=singleton"], {"dependency": "singleton"}),
    (["--signal=USR2@90"], {"signal": "USR2@90"}),
    (["--signal=B:SIGUSR1"], {"signal": "B:SIGUSR1"}),
    (["--reservation=maint"], {"reservation": "maint"}),
    (["--requeue"], {"requeue": True}),
    (["--requeue", "--no-requeue"], {"requeue": False}),
    (["--requeue=expedite"], {"requeue": True, "expedited_requeue": True}),  # Slurm 25.11
    (["--requeue=expedite", "--no-requeue"], {"requeue": False}),
    (["-H"], {"hold": True}),
    (["--comment=x", "--wckey=submitit", "--open-mode=append"],
     {"comment": "x", "wckey": "submitit", "open_mode": "append"}),
    (["--open-mode=t"], {"open_mode": "truncate"}),
    (["--acctg-freq=5"], {"acctg_freq_s": 5}),
    (["--acctg-freq=energy=30,task=10"], {"acctg_freq_s": 10}),
    (["--acctg-freq=task=0"], {"acctg_freq_s": 0}),
    (["--acctg-freq=energy=30"], {}),  # no task interval: the agent's
    (["--export=ALL,K=V"], {"export": "ALL,K=V"}),
    (["--exclusive"], {"exclusive": True}),
    (["-C", "ib&h100"], {"constraint": "ib&h100"}),
    (["-A", "lab", "-q", "high", "--priority=5"], {"account": "lab", "qos": "high", "priority": 5}),
    (["-w", "n[1-2]", "-x", "n3", "-i", "in.txt", "--begin=now+60"],
     {"nodelist": "n[1-2]", "exclude": "n3", "input": "in.txt", "begin": "now+60"}),
])
def test_command_line_fields(argv, fields):
    assert job_fields(submit(argv)) == fields


def test_expedited_requeue_from_the_environment_and_a_script_overridden_by_the_command_line():
    assert job_fields(submit([], {"SBATCH_REQUEUE": "expedite"})) == {"requeue": True, "expedited_requeue": True}
    assert job_fields(submit([], {"SBATCH_REQUEUE": "1"})) == {"requeue": True}, "any other value: plain --requeue"
    assert job_fields(submit(["--no-requeue"], {}, "#SBATCH --requeue=expedite")) == {"requeue": False}


def test_precedence_command_line_over_environment_over_script():
    options = submit(["-t", "10"], {"SBATCH_TIMELIMIT": "20", "SBATCH_PARTITION": "env"},
                     "#SBATCH -t 30 -p script -J fromscript")
    assert job_fields(options) == {"time_limit_s": 600, "partition": "env", "name": "fromscript"}


def test_a_quantity_given_higher_up_replaces_its_other_spellings():
    options = submit(["--mem-per-cpu=1G"], {}, "#SBATCH --mem=4G\n#SBATCH --gpus-per-node=4")
    assert job_fields(options) == {"mem_per_cpu_mib": 1024, "gpus_per_node": 4}
    assert job_fields(submit(["-G", "2"], {}, "#SBATCH --gpus-per-node=4")) == {"gpus": 2}


def test_submitit_script():
    directives = "\n".join(["#SBATCH --cpus-per-task=4", "#SBATCH --error=/f/%j/%j_0_log.err",
                            "#SBATCH --gpus-per-node=2", "#SBATCH --job-name=exp", "#SBATCH --mem=16GB",
                            "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2", "#SBATCH --open-mode=append",
                            "#SBATCH --output=/f/%j/%j_0_log.out", "#SBATCH --signal=USR2@90", "#SBATCH --time=60",
                            "#SBATCH --wckey=submitit", "#SBATCH --exclusive"])
    fields = job_fields(submit(["/f/.submission_file_abc.sh"], {}, directives))
    assert fields == {"cpus_per_task": 4, "error": "/f/%j/%j_0_log.err", "gpus_per_node": 2, "name": "exp",
                      "mem_mib": 16384, "nodes": 2, "ntasks_per_node": 2, "open_mode": "append",
                      "output": "/f/%j/%j_0_log.out",
                      "signal": "USR2@90",
                      "time_limit_s": 3600, "wckey": "submitit", "exclusive": True}


@pytest.mark.parametrize(("argv", "source"), [
    (["job.sh", "a", "-b"], ScriptSource("file", "job.sh", ("a", "-b"))),
    (["-N1", "job.sh", "-N", "2"], ScriptSource("file", "job.sh", ("-N", "2"))),  # options stop at the script
    ([], ScriptSource("stdin")),
    (["--wrap", "echo hi"], ScriptSource("wrap", text=wrap_script("echo hi"))),
])
def test_script_source(argv, source):
    assert parse_sbatch(argv, {})[1] == source


@pytest.mark.parametrize(("text", "parsed"), [
    ("USR2@90", {"signal": 12, "time_s": 90, "batch_only": False, "reservation": False}),
    ("B:SIGUSR1", {"signal": 10, "time_s": 60, "batch_only": True, "reservation": False}),
    ("R:10@5", {"signal": 10, "time_s": 5, "batch_only": False, "reservation": True}),
])
def test_signal_specs(text, parsed):
    assert parse_signal_spec(text) == parsed


def test_wrap_script_and_submitted_line():
    assert wrap_script("true") == "#!/bin/sh\n# This script was created by sbatch --wrap.\n\ntrue\n"
    assert submitted_line(12, parsable=False) == "Submitted batch job 12\n"
    assert submitted_line(12, parsable=True) == "12\n"
    assert submitted_line(12, parsable=False, cluster="c") == "Submitted batch job 12 on cluster c\n"
    assert submitted_line(12, parsable=True, cluster="c") == "12;c\n"


def test_flags():
    options = submit(["--parsable", "-W", "--test-only", "-Q", "-vv"])
    flags = (options.parsable, options.wait, options.test_only, options.quiet, options.verbose)
    assert flags == (True, True, True, True, 2)
    assert submit([], {}, "#SBATCH --parsable").parsable


def test_advisory_options_warn_and_hard_ones_fail():
    options = submit(["--mail-type=END", "--hint=nomultithread"])
    assert options.warnings == (  # in command-line order
        "sbatch: warning: --mail-type is ignored by corral: corral sends no mail\n",
        "sbatch: warning: --hint is ignored by corral: corral allocates CPUs, not sockets\n",
    )
    with pytest.raises(SlurmCommandError) as caught:
        submit(["--cluster-constraint=a100"])
    assert caught.value.stderr == "sbatch: error: --cluster-constraint is not supported by corral\n"


@pytest.mark.parametrize(("argv", "env", "stderr", "code"), [
    (["--time=abc"], {}, "sbatch: error: Invalid --time specification\n", 255),
    ([], {"SBATCH_TIMELIMIT": "abc"}, "sbatch: error: Invalid --time specification\n", 255),
    (["--nodes=x"], {}, 'sbatch: error: "x" is not a valid node count\n', 255),
    (["--ntasks=0"], {}, 'sbatch: error: Invalid numeric value "0" for --ntasks.\n', 1),
    (["-c", "x"], {}, 'sbatch: error: Invalid numeric value "x" for --cpus-per-task.\n', 1),
    (["--mem=xyz"], {}, "sbatch: error: Invalid --mem specification\n", 255),
    (["--mem=1G", "--mem-per-cpu=1G"], {},
     "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.\n", 1),
    (["--signal=FOO@10"], {}, "sbatch: error: Invalid --signal specification\n", 255),
    (["--open-mode=bogus"], {}, "sbatch: error: Invalid --open-mode specification\n", 255),
    (["--acctg-freq=cpu=3"], {}, "sbatch: error: Invalid --acctg-freq specification: 'cpu=3' is not "
     "<task|energy|network|filesystem>=<seconds>\n", 255),
    (["--exclusive=bogus"], {}, "sbatch: error: Invalid --exclusive specification\n", 255),
    (["--exclusive=user"], {}, "sbatch: error: --exclusive=user is not supported by corral: only --exclusive, "
     "whole nodes for the job alone\n", 1),
    (["--requeue=bogus"], {}, "sbatch: error: Invalid --requeue specification\n", 255),
    (["--array=abc"], {}, "sbatch: error: Batch job submission failed: Invalid job array specification\n", 1),
    (["--array=0-5000"], {}, "sbatch: error: Batch job submission failed: Invalid job array specification: "
     "index 5000 is past the limit: task indices go up to 1000 (MaxArraySize=1001)\n", 1),
    (["--dependency=bogus:1"], {}, "sbatch: error: Batch job submission failed: Job dependency problem\n", 1),
    (["--gpus=a100:1", "--gpus-per-task=h100:1"], {}, "sbatch: error: conflicting GPU types: a100, h100\n", 1),
    (["--gpus=x"], {},
     "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification\n", 1),
    (["--gres=gpu:1,shard:2"], {}, "sbatch: error: Invalid generic resource (gres) specification: gpu and shard "
     "cannot be combined: a GPU is given whole (gpu) or in shares (shard, mps), by one kind of share\n", 1),
    (["--gres=mps:200"], {}, "sbatch: error: Invalid generic resource (gres) specification: 'mps:200': mps counts "
     "are percent of one GPU, at most 100\n", 1),
    (["--gres=shard:2", "--gpus=1"], {}, "sbatch: error: Batch job submission failed: Invalid generic resource "
     "(gres) specification: --gpus and --gres=shard cannot be combined: a GPU is given whole or in shares\n", 1),
    (["--wrap", "true", "extra"], {}, "sbatch: error: Script arguments not permitted with --wrap option\n", 1),
    (["--bogus"], {}, "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n", 255),
])
def test_errors(argv, env, stderr, code):
    with pytest.raises(SlurmCommandError) as caught:
        submit(argv, env)
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, code)


def test_the_largest_array_passes_and_one_past_it_names_the_limit():
    assert jobids.parse_task_spec("0-1000")[0][-1] == 1000
    with pytest.raises(SlurmCommandError) as caught:
        submit(["--array=1001"])
    assert "task indices go up to 1000 (MaxArraySize=1001)" in caught.value.stderr


def test_unlimited_time_is_refused_with_corrals_reason():
    with pytest.raises(SlurmCommandError) as caught:
        submit(["--time=UNLIMITED"])
    assert caught.value.stderr.startswith("sbatch: error: Invalid --time specification: unlimited time limits")


@pytest.mark.parametrize(("text", "stderr"), [
    ("", "sbatch: error: Batch script is empty!\n"),
    ("echo hi\n", "sbatch: error: This does not look like a batch script.  The first\n"
                  "sbatch: error: line must start with #! followed by the path to an interpreter.\n"
                  "sbatch: error: For instance: #!/bin/sh\n"),
    ("#!/bin/sh\r\ntrue\r\n", "sbatch: error: Batch script contains DOS line breaks (\\r\\n)\n"
                              "sbatch: error: instead of expected UNIX line breaks (\\n).\n"),
])
def test_script_checks(text, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        check_batch_script(text)
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, 1)


def test_directive_errors():
    with pytest.raises(SlurmCommandError) as caught:
        submit([], {}, "#SBATCH -p gpu extra")
    assert (caught.value.stderr, caught.value.exit_code) == (
        "sbatch: error: Invalid directive found in batch script: extra\n", 255)
    with pytest.raises(SlurmCommandError) as caught:
        submit([], {}, "#SBATCH --bogus")
    assert caught.value.exit_code == 255


def test_directives_end_at_the_first_command():
    assert job_fields(submit([], {}, "#SBATCH -J a\necho\n#SBATCH -J b")) == {"name": "a"}


def test_help_actions():
    assert parse_sbatch(["--version"], {})[0].action == "version"
    assert parse_sbatch(["-h"], {})[0].action == "help"
