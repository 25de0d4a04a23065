import getpass
import json
import os
import socket

import pytest

from corral.cli.submit import build_body, split_command_line
from corral.jobscript import build_submission

SCRIPT = """#!/bin/bash
#SBATCH -N 2 --gpus-per-node=4
#SBATCH --time=1:00:00 --mem=16GB
#CORRAL -J from-script
srun python train.py
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT)
    return path


def test_submit_script_sends_parsed_fields(standin, cli, script, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_SETTING", "42")
    monkeypatch.setenv("SLURM_NTASKS", "8")  # from an enclosing job: must not leak into this one
    result = cli("submit", "-t", "30", "--partition=gpu", str(script))
    assert result.exit_code == 0, result.output
    assert result.stdout == "Submitted job 5\n"
    assert result.stderr == ""
    sent = standin.state.submissions[-1]
    assert sent["nodes"] == 2 and sent["gpus_per_node"] == 4 and sent["mem_mib"] == 16384
    assert sent["time_limit_s"] == 1800  # the command line wins over #SBATCH --time
    assert sent["partition"] == "gpu"
    assert sent["name"] == "from-script"
    assert sent["script"] == SCRIPT and "argv" not in sent
    assert sent["batch"] is True  # as sbatch: the script runs once, its srun lines start the tasks
    assert sent["workdir"] == str(tmp_path)
    assert sent["user"] == getpass.getuser() and sent["uid"] == os.getuid()
    assert sent["submit_host"] == socket.gethostname()
    assert sent["env"]["MY_SETTING"] == "42"
    assert "SLURM_NTASKS" not in sent["env"] and "CORRAL_SECRET" not in sent["env"]


def test_submit_command_after_double_dash(standin, cli):
    result = cli("submit", "-N2", "--gres=gpu:2", "--", "python", "-c", "print(1)", "--nodes", "9")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["argv"] == ["python", "-c", "print(1)", "--nodes", "9"]
    assert sent["nodes"] == 2 and sent["gpus_per_node"] == 2 and sent["name"] == "python"
    assert "script" not in sent and sent["batch"] is True  # the command runs once, as a script would


def test_submit_a_gpu_share_slurm_style(standin, cli):
    result = cli("submit", "--gres=shard:a100:2", "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert (sent["gpus_per_node"], sent["gpu_share"], sent["gpu_model"]) == (1, "shard:2", "a100")
    refused = cli("submit", "--gres=gpu:1,mps:50", "--", "python", "train.py")
    assert refused.exit_code != 0 and "gpu and mps cannot be combined" in refused.output, refused.output


def test_submit_wrap(standin, cli):
    result = cli("submit", "--wrap", "hostname", "-J", "w")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["script"].startswith("#!/bin/sh\n") and sent["script"].endswith("\nhostname\n")
    assert sent["name"] == "w" and sent["batch"] is True


def test_submit_script_on_stdin(standin, cli):
    result = cli("submit", "--parsable", input=SCRIPT)
    assert result.exit_code == 0, result.output
    assert result.stdout == "5\n"
    assert standin.state.submissions[-1]["name"] == "from-script"


def test_submit_json_reply(standin, cli):
    result = cli("submit", "--json", "--wrap", "true")
    assert json.loads(result.stdout) == {"job_id": 5, "task_ids": []}


def test_submit_array_prints_the_array_job_id(standin, cli):
    result = cli("submit", "--array=0-4:2%2", "--wrap", "true")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Submitted job 5\n"  # the array job id, as sbatch prints it
    assert standin.state.submissions[-1]["array"] == "0-4:2%2"
    tasks = [standin.state.jobs[i] for i in (5, 6, 7)]
    assert [(t["array_job_id"], t["array_task_id"], t["array_throttle"]) for t in tasks] == [
        (5, 0, 2), (5, 2, 2), (5, 4, 2)]
    assert cli("submit", "--parsable", "-a", "1,3", "--wrap", "true").stdout == "8\n"
    reply = json.loads(cli("submit", "--json", "-a", "7", "--wrap", "true").stdout)
    assert reply == {"job_id": 10, "task_ids": [10]}


def test_submit_new_options_reach_the_server(standin, cli):
    result = cli("submit", "-A", "hep", "-q", "high", "--queue", "team-a", "--reservation=maint",
                 "-d", "afterok:1:2_3?singleton", "--signal=B:SIGUSR1", "--no-requeue", "-H", "--wrap", "true")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert {k: sent[k] for k in ("account", "qos", "queue", "reservation", "dependency", "signal", "requeue",
                                 "hold")} == {
        "account": "hep", "qos": "high", "queue": "team-a", "reservation": "maint",
        "dependency": "afterok:1:2_3?singleton", "signal": "B:USR1@60", "requeue": False, "hold": True}


def test_submit_expedited_requeue_reaches_the_server(standin, cli):
    assert cli("submit", "--requeue=expedite", "--wrap", "true").exit_code == 0
    sent = standin.state.submissions[-1]
    assert (sent["requeue"], sent["expedited_requeue"]) == (True, True)


def test_submit_new_directives_reach_the_server(standin, cli, tmp_path):
    path = tmp_path / "job.sh"
    path.write_text("#!/bin/bash\n#SBATCH --account=bio --qos=normal -a 1-3\n#CORRAL --queue=q1 --hold\n"
                    "#SBATCH --dependency=afterany:4 --signal=TERM@30 --requeue --reservation=r\nrun\n")
    result = cli("submit", "-q", "high", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout == "Submitted job 5\n"
    sent = standin.state.submissions[-1]
    assert {k: sent[k] for k in ("account", "qos", "array", "queue", "hold", "dependency", "signal", "requeue",
                                 "reservation")} == {
        "account": "bio", "qos": "high", "array": "1-3", "queue": "q1", "hold": True, "dependency": "afterany:4",
        "signal": "TERM@30", "requeue": True, "reservation": "r"}


def test_submit_leaves_unset_options_to_the_server(standin, cli):
    assert cli("submit", "--wrap", "true").exit_code == 0
    sent = standin.state.submissions[-1]
    assert not {"account", "qos", "queue", "array", "dependency", "signal", "requeue", "reservation",
                "hold"} & set(sent)


def test_submit_help_lists_the_new_options(cli):
    text = cli("submit", "--help").stdout
    for option in ("--account", "--qos", "--queue", "--array", "--dependency", "--signal", "--requeue",
                   "--no-requeue", "--reservation", "--hold"):
        assert option in text


def test_submit_default_name_and_chdir(standin, cli, tmp_path, monkeypatch):
    path = tmp_path / "plain.sh"
    path.write_text("#!/bin/sh\necho\n")
    monkeypatch.chdir(tmp_path)
    result = cli("submit", "-D", "sub/dir", "plain.sh")
    assert result.exit_code == 1 and not standin.state.submissions
    assert f"corral: error: working directory {tmp_path / 'sub' / 'dir'} does not exist" in result.stderr
    (tmp_path / "sub" / "dir").mkdir(parents=True)
    result = cli("submit", "-D", "sub/dir", "plain.sh")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["name"] == "plain.sh" and sent["workdir"] == str(tmp_path / "sub" / "dir")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes=x", "--wrap", "true"],
         "invalid value 'x' for --nodes on the command line: expected a positive integer"),
        (["--exclusive=user", "--wrap", "true"], "invalid value 'user' for --exclusive on the command line: only "
                                                 "--exclusive without a value is supported (whole nodes for the job "
                                                 "alone)"),
        (["-F", "nodes.txt", "--wrap", "true"], "unsupported option '-F' on the command line"),  # sbatch's, not ours
        (["--gpu-per-node", "1", "--wrap", "true"],
         "unrecognized option '--gpu-per-node' on the command line; did you mean '--gpus-per-node'?"),
        (["--nodess=2", "--wrap", "true"],
         "unrecognized option '--nodess' on the command line; did you mean '--nodes'?"),
        (["--bogus", "--wrap", "true"], "unrecognized option '--bogus' on the command line"),
        (["-y", "--wrap", "true"], "unrecognized option '-y' on the command line"),
        (["--p", "gpu", "--wrap", "true"],
         "option '--p' is ambiguous (--parsable, --partition, --priority) on the command line"),
        (["--wrap", "true", "script.sh"], "--wrap cannot be combined with a script or a command"),
        (["--"], "no command after '--'"),
        (["missing.sh"], "cannot read script 'missing.sh': no such file; to run a command, put it after '--': "
                           "corral submit [options] -- missing.sh ..."),
        (["--partition", "nope", "--wrap", "true"], "unknown partition 'nope'"),  # the server's 422 detail
        (["--gpus-per-node", "8", "--wrap", "true"], "no node has 8 GPUs (the most is 4)"),
        (["--array=1-x", "--wrap", "true"],
         "invalid value '1-x' for --array on the command line: bad item '1-x'; expected indexes N, N-M or "
         "N-M:STEP, comma-separated, then optionally %MAX (e.g. 0-99%8, 1,3,5, 0-15:4)"),
        (["-a", "9-2", "--wrap", "true"],
         "invalid value '9-2' for -a (--array) on the command line: range '9-2' ends before it starts; expected "
         "indexes N, N-M or N-M:STEP, comma-separated, then optionally %MAX (e.g. 0-99%8, 1,3,5, 0-15:4)"),
        (["-d", "afterok:1,afterok:2?afterok:3", "--wrap", "true"],
         "invalid value 'afterok:1,afterok:2?afterok:3' for -d (--dependency) on the command line: use either ',' "
         "(all) or '?' (any) between dependencies, not both; expected TYPE:ID[:ID...] with TYPE after, afterany, "
         "afterok or afternotok, ID a job id N or an array task N_M, each ID optionally +MINUTES; several joined "
         "by ',' (all) or '?' (any); or singleton"),
        (["--signal=USR9", "--wrap", "true"],
         "invalid value 'USR9' for --signal on the command line: unknown signal 'USR9'; expected [B:]SIG[@SECONDS] "
         "with SIG a name (USR1, SIGUSR1, TERM, ...) or a number"),
        (["-A", "a,b", "--wrap", "true"],
         "invalid value 'a,b' for -A (--account) on the command line: give one name, not a list"),
        (["--hold=1", "--wrap", "true"], "option '--hold' takes no value on the command line"),
        (["--re", "x", "--wrap", "true"], "option '--re' is ambiguous (--requeue, --reservation) on the command line"),
    ],
)
def test_submit_errors(standin, cli, args, message):
    result = cli("submit", *args)
    assert result.exit_code == 1
    assert result.stderr == f"corral: error: {message}\n"
    assert result.stdout == ""


def test_submit_directive_error_names_the_line(standin, cli, tmp_path):
    path = tmp_path / "bad.sh"
    path.write_text("#!/bin/sh\n#SBATCH -N 1\n#SBATCH --foo\nrun\n")
    result = cli("submit", str(path))
    assert result.exit_code == 1
    assert result.stderr == "corral: error: unrecognized option '--foo' in #SBATCH directive line 3\n"
    assert standin.state.submissions == []


def test_submit_refuses_a_non_script(standin, cli, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("just text\n")
    result = cli("submit", str(path))
    assert result.exit_code == 1
    assert "first line must start with #!" in result.stderr


def test_submit_script_arguments_go_to_the_script(standin, cli, script):
    result = cli("submit", str(script), "--epochs", "3")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["script_args"] == ["--epochs", "3"] and sent["nodes"] == 2


def test_submit_help(cli):
    result = cli("submit", "--help")
    assert result.exit_code == 0
    assert "Usage: corral submit" in result.stdout and "--gpus-per-node" in result.stdout
    text = " ".join(result.stdout.split())
    assert "as sbatch does: the script (or COMMAND) runs ONCE, on the first node" in text
    assert "The srun lines inside it start the tasks" in text
    assert "To run a command as every task now and see its output here, use 'corral run' (srun)." in text


def test_run_help_says_it_runs_the_command_as_every_task(cli):
    result = cli("run", "--help")
    assert result.exit_code == 0 and result.stderr == ""
    text = " ".join(result.stdout.split())
    assert result.stdout.startswith("Usage: corral run [OPTIONS] [--] COMMAND [ARGS...]\n")
    assert "Run COMMAND as every task of a new job, as srun does outside a job" in text
    assert "each with its own CUDA_VISIBLE_DEVICES, RANK, LOCAL_RANK, WORLD_SIZE" in text
    assert "use 'corral submit' (sbatch)" in text
    assert cli("run", "-h").stdout == result.stdout


def test_corral_help_says_which_is_which(cli):
    result = cli("--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.replace("│", " ").split())
    assert "'corral submit' is sbatch: its script runs once, and the srun lines in it start the tasks." in text
    assert "'corral run' is srun: it runs a command as every task and shows their output." in text
    assert "submit Submit a batch job (sbatch): the script or command runs once, on the first node" in text
    assert "run Run a command as every task of a new job (srun)" in text


def test_run_is_srun(cli):
    bare = cli("run")
    assert (bare.exit_code, bare.stderr) == (1, "srun: fatal: No command given to execute.\n")
    bad = cli("run", "--gpu-per-task=1", "true")
    assert bad.exit_code == 255 and bad.stderr.startswith("srun: unrecognized option '--gpu-per-task=1'\n")


def test_submit_url_option_wins(standin, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:9")
    result = cli("submit", "--url", standin.url, "--wrap", "true")
    assert result.exit_code == 0, result.output


def test_split_command_line():
    line = split_command_line(["-N2", "--gpus-per-n", "2", "--js", "--url=http://x", "--", "a", "-b"])
    assert line.sbatch_tokens == ["-N", "2", "--gpus-per-n", "2"]
    assert line.json and line.url == "http://x" and not line.parsable
    assert line.positionals == ["a", "-b"] and line.command_given


def test_split_command_line_keeps_an_optional_value_attached():
    line = split_command_line(["--requeue=expedite", "--req", "x.sh"])
    assert line.sbatch_tokens == ["--requeue=expedite", "--req"]
    assert build_submission([], line.sbatch_tokens) == {"requeue": True}, "the last one wins"


def test_split_command_line_keeps_flags_without_values():
    line = split_command_line(["-H", "--no-req", "--json", "-a", "1-3", "--requeue", "x.sh"])
    assert line.sbatch_tokens == ["-H", "--no-req", "-a", "1-3", "--requeue"]
    assert line.json and line.positionals == ["x.sh"]


def test_build_body_without_server(tmp_path):
    import io

    line = split_command_line(["--wrap", "true"])
    body = build_body(line, io.StringIO(""), {"A": "1", "SLURM_JOB_ID": "3"}, cwd=str(tmp_path))
    assert body["env"] == {"A": "1"} and body["workdir"] == str(tmp_path) and body["name"] == "wrap"
    assert body["batch"] is True


def test_build_body_leaves_private_variables_behind(tmp_path):
    import io

    env = {"PATH": "/bin", "CORRAL_SECRET": "x", "CORRAL_URL": "u", "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "n",
           "SBATCH_PARTITION": "p", "SRUN_DEBUG": "1"}
    body = build_body(split_command_line(["--wrap", "true"]), io.StringIO(""), env, cwd=str(tmp_path))
    assert body["env"] == {"PATH": "/bin", "CORRAL_URL": "u"}


def test_submit_body_is_the_one_sbatch_builds(tmp_path):
    """corral submit and sbatch submit through one path: the same script gives the same body."""
    import io

    from corral.slurm.sbatch.main import submission
    from corral.slurm.sbatch.opts import apply_script, parse_sbatch

    path = tmp_path / "train.sh"
    path.write_text(SCRIPT)
    env = {"PATH": "/bin", "HOME": "/h", "USER": getpass.getuser(), "SLURM_NTASKS": "8"}
    ours = build_body(split_command_line([str(path), "--epochs", "3"]), io.StringIO(""), env, cwd=str(tmp_path))
    options, source = parse_sbatch([str(path), "--epochs", "3"], env)
    theirs, _ = submission(apply_script(options, SCRIPT), source, SCRIPT, env, str(tmp_path))
    assert ours == theirs
