"""sbatch's console script against a real controller: what it prints, what it submits, and jobs that
run as their scripts say."""
from __future__ import annotations

import re

import pytest

from tests.e2e.harness import free_port

from . import golden_records as golden
from .commands import command_env, run

pytestmark = pytest.mark.slow

# The script submitit 1.5.4 writes (slurm-compat.md §2.1), its srun line replaced by a plain command.
SUBMITIT_SCRIPT = """#!/bin/bash

# Parameters
#SBATCH --cpus-per-task=4
#SBATCH --error={folder}/%j/%j_0_log.err
#SBATCH --gpus-per-node=2
#SBATCH --job-name=exp
#SBATCH --mem=16GB
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --open-mode=append
#SBATCH --output={folder}/%j/%j_0_log.out
#SBATCH --signal=USR2@90
#SBATCH --time=60
#SBATCH --wckey=submitit

# command
export SUBMITIT_EXECUTOR=slurm
echo "job $SLURM_JOB_ID on $SLURM_JOB_NODELIST with $SUBMITIT_EXECUTOR"
"""


def submitted_id(stdout: str) -> int:
    match = re.fullmatch(r"Submitted batch job (\d+)\n", stdout)
    assert match, stdout
    return int(match.group(1))


def test_plain_submission_prints_only_the_id_line_and_the_job_is_visible_at_once(cmd, slurm_cluster):
    result = cmd("sbatch", "-o", "/dev/null", "--wrap", "true")
    assert result.code == 0 and result.stderr == ""
    job = slurm_cluster.job(submitted_id(result.stdout))
    assert job["name"] == "wrap" and job["batch"] and job["workdir"] == str(cmd.workdir)
    slurm_cluster.wait_state(job["id"], "COMPLETED")


def test_parsable_prints_the_bare_id(cmd, slurm_cluster):
    result = cmd("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true")
    assert result.code == 0 and re.fullmatch(r"\d+\n", result.stdout) and result.stderr == ""
    slurm_cluster.wait_state(int(result.stdout), "COMPLETED")


def test_wrap_runs_in_the_submission_directory(cmd, slurm_cluster, tmp_path):
    job_id = cmd.submit("-o", "out-%j.txt", "--wrap", "echo hello; pwd")
    slurm_cluster.wait_state(job_id, "COMPLETED")
    assert (tmp_path / f"out-{job_id}.txt").read_text() == f"hello\n{tmp_path}\n"


def test_slurm_gpus_per_node_is_set_when_requested(cmd, slurm_cluster, tmp_path):
    show = "echo ${SLURM_GPUS_PER_NODE:-unset}"
    asked = cmd.submit("--gpus-per-node=2", "-o", "asked.out", "--wrap", show)
    total = cmd.submit("--gpus=2", "-o", "total.out", "--wrap", show)
    for job_id in (asked, total):
        slurm_cluster.wait_state(job_id, "COMPLETED")
    assert ((tmp_path / "asked.out").read_text(), (tmp_path / "total.out").read_text()) == ("2\n", "unset\n")


def test_script_from_stdin_with_directives(cmd, slurm_cluster, tmp_path):
    script = "#!/bin/sh\n#SBATCH --job-name=fromstdin\n#SBATCH --time=2\n#SBATCH -o stdin.out\necho from stdin\n"
    job_id = submitted_id(cmd("sbatch", stdin=script).stdout)
    job = slurm_cluster.wait_state(job_id, "COMPLETED")
    assert (job["name"], job["time_limit_s"]) == ("fromstdin", 120)
    assert (tmp_path / "stdin.out").read_text() == "from stdin\n"


def test_script_file_directives_arguments_and_command_line_precedence(cmd, slurm_cluster, tmp_path):
    (tmp_path / "train.sh").write_text(
        "#!/bin/bash\n#SBATCH -J fromscript --gres=gpu:2\n#SBATCH -c 2 --mem=1G\n#SBATCH --time=5\n"
        "#SBATCH --comment=hello -o train.out\n"
        'echo "$1 $2 $SLURM_JOB_NAME $SLURM_CPUS_PER_TASK"\n')
    job_id = cmd.submit("-J", "fromcli", "train.sh", "first", "second")
    job = slurm_cluster.wait_state(job_id, "COMPLETED")
    assert (job["name"], job["gpus_per_node"], job["cpus_per_task"], job["mem_per_node_mib"]) == ("fromcli", 2, 2, 1024)
    assert (job["time_limit_s"], job["comment"]) == (300, "hello")
    assert (tmp_path / "train.out").read_text() == "first second fromcli 2\n"


def test_unknown_partition_prints_what_slurm_prints(cmd):
    fixture = golden.fixture("sbatch_invalid_partition")
    result = cmd(*fixture["argv"])
    assert (result.stdout, result.stderr, result.code) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])


@pytest.mark.parametrize("name", ["sbatch_invalid_option", "sbatch_invalid_short", "sbatch_ambiguous"])
def test_bad_options_print_what_slurm_prints(cmd, name):
    fixture = golden.fixture(name)
    result = cmd(*fixture["argv"])
    assert (result.stdout, result.stderr, result.code) == (fixture["stdout"], fixture["stderr"], fixture["exit_code"])


def test_settings_the_api_lacks_are_errors_naming_the_option(cmd):
    result = cmd("sbatch", "-i", "in.txt", "--wrap", "true")
    assert result.code == 1 and result.stdout == ""
    assert result.stderr == ("sbatch: error: --input is not supported by corral yet: "
                             "its API has no such job setting\n")


def test_export_decides_the_job_environment(cmd, slurm_cluster, tmp_path):
    submitter = {"FOO": "foo", "SLURM_STALE": "1", "SRUN_STALE": "1"}
    ids = {}
    for export in ("ALL,EXTRA=1", "NONE", "FOO"):
        out = f"env-{export.replace(',', '_').replace('=', '_')}.txt"
        result = cmd("sbatch", "--parsable", f"--export={export}", "-o", out, "--wrap", "env", env=submitter)
        ids[export] = (int(result.stdout), tmp_path / out)
    envs = {}
    for export, (job_id, path) in ids.items():
        slurm_cluster.wait_state(job_id, "COMPLETED")
        envs[export] = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    assert envs["ALL,EXTRA=1"]["FOO"] == "foo" and envs["ALL,EXTRA=1"]["EXTRA"] == "1"
    assert envs["ALL,EXTRA=1"]["SLURM_JOB_ID"] == str(ids["ALL,EXTRA=1"][0]), "the job's own Slurm variables"
    assert not {"SLURM_STALE", "SRUN_STALE"} & set(envs["ALL,EXTRA=1"])
    assert "FOO" not in envs["NONE"]
    assert envs["FOO"]["FOO"] == "foo" and "EXTRA" not in envs["FOO"]
    # The agent, not the submitter, tells every job where its controller is (for scontrol requeue).
    assert {envs[e]["CORRAL_URL"] for e in envs} == {slurm_cluster.url}


def test_submitit_job_logs_into_a_directory_made_after_sbatch_returns(cmd, slurm_cluster, tmp_path):
    folder = tmp_path / "submitit"
    folder.mkdir()
    script = folder / ".submission_file_0123abcd.sh"
    script.write_text(SUBMITIT_SCRIPT.format(folder=folder))
    result = cmd("sbatch", str(script))
    assert result.code == 0 and result.stderr == ""
    job_id = int(re.search(r"job (?P<id>[0-9]+)", result.stdout).group("id"))  # submitit's parsing
    (folder / str(job_id)).mkdir()  # submitit's move_temporary_file: only now
    job = slurm_cluster.wait_state(job_id, "COMPLETED")
    assert (job["num_nodes"], job["gpus_per_node"], job["wckey"], job["open_mode"]) == (2, 2, "submitit", "append")
    log = (folder / str(job_id) / f"{job_id}_0_log.out").read_text()
    assert log == f"job {job_id} on {job['nodelist']} with slurm\n"


def test_wait_exits_with_the_jobs_status(cmd):
    result = cmd("sbatch", "--wait", "-o", "/dev/null", "--wrap", "exit 3")
    assert (result.code, result.stderr) == (3, "")
    submitted_id(result.stdout)


def test_an_unreachable_controller_is_a_slurm_like_error(tmp_path):
    env = command_env(f"http://127.0.0.1:{free_port()}", tmp_path / "no-secret", CORRAL_SECRET="x")
    result = run("sbatch", "--wrap", "true", env=env)
    assert result.code == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == "sbatch: error: Unable to contact slurm controller (connect failure)"
    assert lines[1].startswith("sbatch: error: corral's controller at http://127.0.0.1:") and len(lines) == 2


def test_a_relative_chdir_is_the_submit_dirs_and_a_missing_one_is_refused_at_submission(cmd, slurm_cluster,
                                                                                       tmp_path):
    (tmp_path / "sub").mkdir()
    job_id = cmd.submit("-D", "sub", "-o", "out.txt", "--wrap", "pwd")
    slurm_cluster.wait_state(job_id, "COMPLETED")
    assert (tmp_path / "sub" / "out.txt").read_text() == f"{tmp_path / 'sub'}\n"
    jobs_before = len(slurm_cluster.http.get("/api/v1/jobs", params={"all": "true"}).json())
    (tmp_path / "file").write_text("")
    for command, chdir, problem in [("sbatch", "missing", "does not exist"), ("sbatch", "file", "is not a directory"),
                                    ("srun", "missing", "does not exist"), ("salloc", "missing", "does not exist")]:
        result = cmd(command, "-D", chdir, *(["--wrap", "true"] if command == "sbatch" else ["true"]))
        assert result.code == 1 and result.stdout == "", result
        assert result.stderr == f"{command}: error: working directory {tmp_path / chdir} {problem}\n", result
    jobs_after = len(slurm_cluster.http.get("/api/v1/jobs", params={"all": "true"}).json())
    assert jobs_after == jobs_before, "nothing was queued"
