import pytest

from corral.jobscript import DirectiveError, check_script, parse_directives, wrap_script

SUBMITIT_SCRIPT = """#!/bin/bash

# Parameters
#SBATCH --cpus-per-task=4
#SBATCH --error=/f/%j/%j_0_log.err
#SBATCH --gpus-per-node=2
#SBATCH --job-name=exp
#SBATCH --mem=16GB

# command
export SUBMITIT_EXECUTOR=slurm
#SBATCH --nodes=9
srun python -u -m submitit.core._submit /f/%j
"""


def test_reads_directives_up_to_the_first_command():
    assert parse_directives(SUBMITIT_SCRIPT) == [
        "--cpus-per-task=4", "--error=/f/%j/%j_0_log.err", "--gpus-per-node=2", "--job-name=exp", "--mem=16GB",
    ]


def test_tokens_remember_their_line():
    tokens = parse_directives(SUBMITIT_SCRIPT)
    assert [t.where for t in tokens][:2] == ["in #SBATCH directive line 4", "in #SBATCH directive line 5"]


@pytest.mark.parametrize(
    ("line", "tokens"),
    [
        ("#SBATCH -N 2 --ntasks-per-node=4", ["-N", "2", "--ntasks-per-node=4"]),  # several options
        ("#SBATCH -J 'my job' --output=\"a b.out\"", ["-J", "my job", "--output=a b.out"]),  # shlex quoting
        ("#SBATCH --mem=1G # a trailing comment", ["--mem=1G"]),
        ("#SBATCH --output=run#1.out", ["--output=run#1.out"]),  # '#' inside a word is no comment
        ("#SBATCH -J '#hash'", ["-J", "#hash"]),
        ("#SBATCH\t--time=5", ["--time=5"]),
        ("#SBATCH", []),
        ("#CORRAL --gpus=2", ["--gpus=2"]),  # corral's own prefix
        ("#SBATCH --time=5   ", ["--time=5"]),
    ],
)
def test_directive_line_forms(line, tokens):
    assert parse_directives(f"#!/bin/sh\n{line}\necho\n") == tokens


@pytest.mark.parametrize(
    "line",
    ["# SBATCH -N 2", "  #SBATCH -N 2", "#SBATCHX -N 2", "##SBATCH -N 2", "#sbatch -N 2", "#!SBATCH -N 2"],
)
def test_lookalikes_are_comments(line):
    assert parse_directives(f"#!/bin/sh\n{line}\n#SBATCH -n 3\necho\n") == ["-n", "3"]


def test_sbatch_and_corral_lines_mix_in_order():
    script = "#!/bin/sh\n#SBATCH -N 1\n#CORRAL -N 2\n\n   \n#SBATCH -t 5\nhostname\n#CORRAL -N 3\n"
    tokens = parse_directives(script)
    assert tokens == ["-N", "1", "-N", "2", "-t", "5"]
    assert tokens[2].where == "in #CORRAL directive line 3"


def test_no_shebang_still_reads_from_line_one():
    assert parse_directives("#SBATCH -N 2\necho") == ["-N", "2"]


def test_nothing_before_a_command():
    assert parse_directives("#!/bin/sh\necho hi\n#SBATCH -N 2\n") == []


def test_unbalanced_quote_names_the_line():
    with pytest.raises(DirectiveError, match="cannot parse #SBATCH directive line 3"):
        parse_directives("#!/bin/sh\n#SBATCH -N 1\n#SBATCH -J 'oops\n")


def test_check_script_accepts_a_normal_script():
    check_script(SUBMITIT_SCRIPT)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("  \n", "empty"),
        ("echo hi\n", "first line must start with #!"),
        ("\n#!/bin/sh\n", "first line must start with #!"),
        ("#!/bin/sh\r\necho hi\r\n", "DOS line breaks"),
    ],
)
def test_check_script_refuses(text, message):
    with pytest.raises(DirectiveError, match=message):
        check_script(text)


def test_wrap_script_is_shaped_like_sbatch():
    script = wrap_script("srun hostname")
    assert script == "#!/bin/sh\n# This script was created by corral submit --wrap.\n\nsrun hostname\n"
    check_script(script)
    assert parse_directives(script) == []
