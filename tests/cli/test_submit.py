import getpass
import json
import os
import socket

import pytest

from corral.cli.submit import build_body, job_environment, split_command_line

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
    assert "script" not in sent


def test_submit_wrap(standin, cli):
    result = cli("submit", "--wrap", "hostname", "-J", "w")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["script"].startswith("#!/bin/sh\n") and sent["script"].endswith("\nhostname\n")
    assert sent["name"] == "w"


def test_submit_script_on_stdin(standin, cli):
    result = cli("submit", "--parsable", input=SCRIPT)
    assert result.exit_code == 0, result.output
    assert result.stdout == "5\n"
    assert standin.state.submissions[-1]["name"] == "from-script"


def test_submit_json_reply(standin, cli):
    result = cli("submit", "--json", "--wrap", "true")
    assert json.loads(result.stdout) == {"job_id": 5}


def test_submit_default_name_and_chdir(standin, cli, tmp_path, monkeypatch):
    path = tmp_path / "plain.sh"
    path.write_text("#!/bin/sh\necho\n")
    monkeypatch.chdir(tmp_path)
    result = cli("submit", "-D", "sub/dir", "plain.sh")
    assert result.exit_code == 0, result.output
    sent = standin.state.submissions[-1]
    assert sent["name"] == "plain.sh" and sent["workdir"] == str(tmp_path / "sub" / "dir")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes=x", "--wrap", "true"],
         "invalid value 'x' for --nodes on the command line: expected a positive integer"),
        (["--exclusive", "--wrap", "true"], "unsupported option '--exclusive' on the command line"),
        (["--p", "gpu", "--wrap", "true"],
         "option '--p' is ambiguous (--parsable, --partition, --priority) on the command line"),
        (["--wrap", "true", "script.sh"], "--wrap cannot be combined with a script or a command"),
        (["--"], "no command after '--'"),
        (["missing.sh"], "cannot read script 'missing.sh': no such file; to run a command, put it after '--': "
                           "corral submit [options] -- missing.sh ..."),
        (["--partition", "nope", "--wrap", "true"], "unknown partition 'nope'"),  # the server's 422 detail
        (["--gpus-per-node", "8", "--wrap", "true"], "no node has 8 GPUs (the most is 4)"),
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
    assert result.stderr == "corral: error: unsupported option '--foo' in #SBATCH directive line 3\n"
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


def test_submit_url_option_wins(standin, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:9")
    result = cli("submit", "--url", standin.url, "--wrap", "true")
    assert result.exit_code == 0, result.output


def test_split_command_line():
    line = split_command_line(["-N2", "--gpus-per-n", "2", "--js", "--url=http://x", "--", "a", "-b"])
    assert line.sbatch_tokens == ["-N", "2", "--gpus-per-n", "2"]
    assert line.json and line.url == "http://x" and not line.parsable
    assert line.positionals == ["a", "-b"] and line.command_given


def test_build_body_without_server(tmp_path):
    import io

    line = split_command_line(["--wrap", "true"])
    body = build_body(line, io.StringIO(""), {"A": "1", "SLURM_JOB_ID": "3"}, cwd=str(tmp_path))
    assert body["env"] == {"A": "1"} and body["workdir"] == str(tmp_path) and body["name"] == "wrap"


def test_job_environment_drops_private_variables():
    env = {"PATH": "/bin", "CORRAL_SECRET": "x", "CORRAL_URL": "u", "SLURM_JOB_ID": "1", "SLURMD_NODENAME": "n"}
    assert job_environment(env) == {"PATH": "/bin", "CORRAL_URL": "u"}
