import pytest

from corral.jobscript import DirectiveError, build_submission, parse_directives
from corral.slurm.common.getopt import REQUIRED


def from_cli(*tokens):
    return build_submission([], list(tokens))


def from_script(*lines):
    return build_submission(parse_directives("#!/bin/sh\n" + "\n".join(lines) + "\nrun\n"), [])


@pytest.mark.parametrize(
    ("tokens", "fields"),
    [
        (["-N", "2"], {"nodes": 2}),
        (["-N2"], {"nodes": 2}),
        (["--nodes=2"], {"nodes": 2}),
        (["--nodes", "2"], {"nodes": 2}),
        (["--nodes", "2"], {"nodes": 2}),
        (["-n", "8"], {"ntasks": 8}),
        (["--ntasks=8"], {"ntasks": 8}),
        (["--ntasks-per-node=4"], {"ntasks_per_node": 4}),
        (["--tasks-per-node=4"], {"ntasks_per_node": 4}),  # alias
        (["--ntasks-per=4"], {"ntasks_per_node": 4}),
        (["--tasks", "4"], {"ntasks_per_node": 4}),  # prefix of the alias
        (["-G", "8"], {"gpus": 8}),
        (["-G8"], {"gpus": 8}),
        (["--gpus=a100:8"], {"gpus": 8, "gpu_model": "a100"}),  # the type is a model constraint
        (["--gpus=0"], {"gpus": 0}),
        (["-w", "n[1-2]", "-x", "n3", "-C", "ib&h100", "--exclusive"],
         {"nodelist": "n[1-2]", "exclude": "n3", "constraint": "ib&h100", "exclusive": True}),
        (["--gpus-per-node=4"], {"gpus_per_node": 4}),
        (["--gpus-per-node", "h100:4"], {"gpus_per_node": 4, "gpu_model": "h100"}),
        (["--gpus-per-task=1"], {"gpus_per_task": 1}),
        (["--gres=gpu:2"], {"gpus_per_node": 2}),
        (["--gres=gpu:a100:2"], {"gpus_per_node": 2, "gpu_model": "a100"}),
        (["--gres=gpu:A100:2", "--gpus-per-task=a100:1"],
         {"gpus_per_node": 2, "gpus_per_task": 1, "gpu_model": "A100"}),
        (["--gres=gpu"], {"gpus_per_node": 1}),  # count defaults to 1, as in Slurm
        (["--gres=gpu:tesla"], {"gpus_per_node": 1, "gpu_model": "tesla"}),
        (["--gres=none"], {}),
        # A share of one GPU (Slurm's gres/shard and gres/mps): one GPU per node, the share as written.
        (["--gres=shard:2"], {"gpus_per_node": 1, "gpu_share": "shard:2"}),
        (["--gres=shard"], {"gpus_per_node": 1, "gpu_share": "shard:1"}),
        (["--gres=shard:a100:3"], {"gpus_per_node": 1, "gpu_share": "shard:3", "gpu_model": "a100"}),
        (["--gres=mps:50"], {"gpus_per_node": 1, "gpu_share": "mps:50"}),
        (["--gres=mps:100"], {"gpus_per_node": 1, "gpu_share": "mps:100"}),
        (["-c", "4"], {"cpus_per_task": 4}),
        (["--cpus-per-task=4"], {"cpus_per_task": 4}),
        (["--mem=16GB"], {"mem_mib": 16384}),
        (["--mem", "1000"], {"mem_mib": 1000}),
        (["--mem=0"], {"mem_mib": 0}),
        (["--mem-per-gpu=8G"], {"mem_per_gpu_mib": 8192}),
        (["--mem-per-cpu=512M"], {"mem_per_cpu_mib": 512}),
        (["-t", "60"], {"time_limit_s": 3600}),
        (["-t60"], {"time_limit_s": 3600}),
        (["--time=1-00:00:00"], {"time_limit_s": 86400}),
        (["--ti", "5"], {"time_limit_s": 300}),
        (["-p", "gpu"], {"partition": "gpu"}),
        (["--partition=gpu"], {"partition": "gpu"}),
        (["-J", "train"], {"name": "train"}),
        (["--job-name=my job"], {"name": "my job"}),
        (["-J", "-x"], {"name": "-x"}),  # a required value is taken whatever it looks like
        (["-o", "out-%j.log"], {"output": "out-%j.log"}),
        (["--output=%x.out"], {"output": "%x.out"}),
        (["-e", "err.log"], {"error": "err.log"}),
        (["--error", "err.log"], {"error": "err.log"}),
        (["-D", "/scratch"], {"workdir": "/scratch"}),
        (["--chdir=sub"], {"workdir": "sub"}),
        (["--priority=10"], {"priority": 10}),
        (["-N", "1", "-N", "3"], {"nodes": 3}),  # the last one wins
        ([], {}),
        (["-A", "hep"], {"account": "hep"}),
        (["-Ahep"], {"account": "hep"}),
        (["--account=hep"], {"account": "hep"}),
        (["--acco", "hep"], {"account": "hep"}),
        (["-q", "high"], {"qos": "high"}),
        (["--qos=high"], {"qos": "high"}),
        (["--queue", "team-a"], {"queue": "team-a"}),
        (["--que=team-a"], {"queue": "team-a"}),
        (["--reservation=maint"], {"reservation": "maint"}),
        (["--res", "maint"], {"reservation": "maint"}),
        (["-a", "0-99%8"], {"array": "0-99%8"}),
        (["-a1,3,5"], {"array": "1,3,5"}),
        (["--array=0-15:4"], {"array": "0-15:4"}),
        (["--array", " 7 "], {"array": "7"}),
        (["-d", "afterok:12"], {"dependency": "afterok:12"}),
        (["-dafterany:1:2_3"], {"dependency": "afterany:1:2_3"}),
        (["--dependency=after:5+10,afternotok:6"], {"dependency": "after:5+10,afternotok:6"}),
        (["--dep", "afterok:1?afterok:2"], {"dependency": "afterok:1?afterok:2"}),
        (["--dependency=singleton"], {"dependency": "singleton"}),
        (["--signal=USR1"], {"signal": "USR1@60"}),  # Slurm's default lead time
        (["--signal", "SIGUSR2@90"], {"signal": "USR2@90"}),
        (["--signal=B:term@120"], {"signal": "B:TERM@120"}),
        (["--sig=10@0"], {"signal": "10@0"}),
        (["--requeue"], {"requeue": True}),
        (["--no-requeue"], {"requeue": False}),
        (["--no-req"], {"requeue": False}),
        (["--no-requeue", "--requeue"], {"requeue": True}),  # the last one wins
        (["--requeue", "--no-requeue"], {"requeue": False}),
        (["--requeue=expedite"], {"requeue": True, "expedited_requeue": True}),
        (["--requeue=expedite", "--no-requeue"], {"requeue": False}),
        (["-H"], {"hold": True}),
        (["--hold"], {"hold": True}),
        (["--ho"], {"hold": True}),
    ],
)
def test_option_forms(tokens, fields):
    assert from_cli(*tokens) == fields


def test_directives_from_a_submitit_script():
    fields = from_script(
        "#SBATCH --cpus-per-task=4", "#SBATCH --error=/f/%j/%j_0_log.err", "#SBATCH --gpus-per-node=2",
        "#SBATCH --job-name=exp", "#SBATCH --mem=16GB", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=2",
        "#SBATCH --output=/f/%j/%j_0_log.out", "#SBATCH --time=60",
    )
    assert fields == {
        "cpus_per_task": 4, "error": "/f/%j/%j_0_log.err", "gpus_per_node": 2, "name": "exp", "mem_mib": 16384,
        "nodes": 2, "ntasks_per_node": 2, "output": "/f/%j/%j_0_log.out", "time_limit_s": 3600,
    }


def test_new_options_as_directives():
    fields = from_script(
        "#SBATCH -A hep -q high", "#SBATCH --queue=team-a --reservation=maint", "#SBATCH --array=0-9%2",
        "#SBATCH -d afterok:41_2+5", "#SBATCH --signal=B:USR1@300", "#SBATCH --no-requeue", "#CORRAL -H",
    )
    assert fields == {"account": "hep", "qos": "high", "queue": "team-a", "reservation": "maint",
                      "array": "0-9%2", "dependency": "afterok:41_2+5", "signal": "B:USR1@300", "requeue": False,
                      "hold": True}


def test_command_line_overrides_new_directives():
    script = parse_directives("#!/bin/sh\n#SBATCH --no-requeue -a 1-3 -A bio -H\n")
    assert build_submission(script, ["--requeue", "--array=5", "-A", "hep"]) == {
        "requeue": True, "array": "5", "account": "hep", "hold": True,
    }


def test_ray_style_one_line():
    fields = from_script("#SBATCH --job-name=test --cpus-per-task=5 --mem-per-cpu=1GB --nodes=4 "
                         "--tasks-per-node=1 --time=00:30:00")
    assert fields == {"name": "test", "cpus_per_task": 5, "mem_per_cpu_mib": 1024, "nodes": 4,
                      "ntasks_per_node": 1, "time_limit_s": 1800}


def test_value_in_the_next_token_of_a_directive():
    assert from_script("#SBATCH -J job -t 10") == {"name": "job", "time_limit_s": 600}


def test_command_line_overrides_script():
    script = parse_directives("#!/bin/sh\n#SBATCH -N 2 -J a --time=10\n")
    assert build_submission(script, ["-N", "4", "--time", "20"]) == {"nodes": 4, "name": "a", "time_limit_s": 1200}


@pytest.mark.parametrize(
    ("script_line", "cli", "fields"),
    [
        # One quantity stated another way on the command line replaces the script's statement.
        ("--mem=16G", ["--mem-per-cpu=1G"], {"mem_per_cpu_mib": 1024}),
        ("--mem-per-gpu=8G", ["--mem=4G"], {"mem_mib": 4096}),
        ("--gpus-per-node=4", ["--gpus=2"], {"gpus": 2}),
        ("--gpus=8 --gpus-per-node=4", ["--gres=gpu:1"], {"gpus_per_node": 1}),
        ("--gpus-per-node=4", ["--gres=none"], {}),
        ("--gpus-per-node=4 --gpus-per-task=1", ["-G", "2"], {"gpus": 2, "gpus_per_task": 1}),
        ("--gpus=8 --gpus-per-node=4", [], {"gpus": 8, "gpus_per_node": 4}),
        ("--gres=shard:2", ["--gpus=1"], {"gpus": 1}),
        ("--gpus=8", ["--gres=mps:25"], {"gpus_per_node": 1, "gpu_share": "mps:25"}),
    ],
)
def test_groups_override_as_a_whole(script_line, cli, fields):
    assert build_submission(parse_directives(f"#!/bin/sh\n#SBATCH {script_line}\n"), cli) == fields


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["#SBATCH --foo"], "unrecognized option '--foo' in #SBATCH directive line 2"),
        (["#SBATCH -N 1", "#SBATCH --exclusive=user"], "only --exclusive without a value is supported"),
        (["#CORRAL --licenses=a:1"], "unsupported option '--licenses' in #CORRAL directive line 2"),
        (["#SBATCH --nodefile=f"], "unsupported option '--nodefile' in #SBATCH directive line 2"),
        (["#SBATCH -N x"],
         "invalid value 'x' for -N (--nodes) in #SBATCH directive line 2: expected a positive integer"),
        (["#SBATCH --nodes=0"], "invalid value '0' for --nodes in #SBATCH directive line 2"),
        (["#SBATCH --nodes=2-4"], "invalid value '2-4' for --nodes"),
        (["#SBATCH -n -1"], "invalid value '-1' for -n (--ntasks)"),
        (["#SBATCH --ntasks-per-node=x"], "invalid value 'x' for --ntasks-per-node"),
        (["#SBATCH --gpus=many"], "invalid value 'many' for --gpus.*GPU count"),
        (["#SBATCH --gpus-per-node=-1"], "invalid value '-1' for --gpus-per-node"),
        (["#SBATCH --gpus-per-task=a100"], "invalid value 'a100' for --gpus-per-task"),
        (["#SBATCH --gres=tpu:1"], "invalid value 'tpu:1' for --gres.*corral schedules gpu.*shard.*mps"),
        (["#SBATCH --gres=gpu:2,shard:4"], "gpu and shard cannot be combined: a GPU is given whole"),
        (["#SBATCH --gres=shard:2,mps:50"], "shard and mps cannot be combined"),
        (["#SBATCH --gres=shard:1,shard:2"], "give shard only once"),
        (["#SBATCH --gres=shard:0"], "'shard:0' asks for no shard"),
        (["#SBATCH --gres=mps:150"], "'mps:150': mps counts are percent of one GPU, at most 100"),
        (["#SBATCH --gres=shard:a:b:2"], "unsupported resource"),
        (["#SBATCH --gres=shard:2 --gpus=1"], "--gpus and --gres=shard cannot be combined"),
        (["#SBATCH --gres=mps:20 --gpus-per-task=1"], "--gpus-per-task and --gres=mps cannot be combined"),
        (["#SBATCH --gres=gpu:1,gpu:2"], "give gpu only once"),
        (["#SBATCH --gres=gpu:a:b:3"], "unsupported resource"),
        (["#SBATCH --gres=gpu:"], "invalid GPU type or count"),
        (["#SBATCH --gres=gpu:a100:2 --gpus-per-task=h100:1"], "conflicting GPU types"),
        (["#SBATCH -c 0"], "invalid value '0' for -c (--cpus-per-task)"),
        (["#SBATCH --mem=lots"], "invalid value 'lots' for --mem in #SBATCH directive line 2: expected N"),
        (["#SBATCH --mem-per-gpu=1.5G"], "invalid value '1.5G' for --mem-per-gpu"),
        (["#SBATCH --mem-per-cpu=x"], "invalid value 'x' for --mem-per-cpu"),
        (["#SBATCH --time=UNLIMITED"], "invalid value 'UNLIMITED' for --time.*unlimited time limits are not supported"),
        (["#SBATCH -t 1:2:3:4"], "invalid value '1:2:3:4' for -t (--time).*expected M, M:S"),
        (["#SBATCH -p a,b"], "invalid value 'a,b' for -p (--partition).*one partition"),
        (["#SBATCH --partition="], "invalid value '' for --partition.*non-empty"),
        (["#SBATCH -J ''"], "invalid value '' for -J (--job-name)"),
        (["#SBATCH --output="], "invalid value '' for --output"),
        (["#SBATCH --priority=high"], "invalid value 'high' for --priority"),
        (["#SBATCH --gpus-per", "2"], "option '--gpus-per' is ambiguous (--gpus-per-node, --gpus-per-task)"),
        (["#SBATCH --mem-per=1G"], "option '--mem-per' is ambiguous"),
        (["#SBATCH --n=1"],
         "option '--n' is ambiguous (--no-container-mount-home, --no-container-remap-root, --no-requeue, "
         "--nodelist, --nodes, --ntasks, --ntasks-per-node)"),
        (["#SBATCH --nod=1"], "option '--nod' is ambiguous (--nodelist, --nodes)"),  # as in sbatch
        (["#SBATCH --re"], "option '--re' is ambiguous (--requeue, --reservation)"),
        (["#SBATCH --q=a"], "option '--q' is ambiguous (--qos, --queue)"),
        (["#SBATCH -N"], "option '-N' needs a value in #SBATCH directive line 2"),
        (["#SBATCH --time"], "option '--time' needs a value"),
        (["#SBATCH extra"], "unexpected argument 'extra' in #SBATCH directive line 2"),
        (["#SBATCH -N 1 -- cmd"], "unexpected argument 'cmd'"),
        (["#SBATCH -N 1 --"], "unexpected argument '--' in #SBATCH directive line 2"),
        (["#SBATCH -A a,b"], "invalid value 'a,b' for -A (--account) in #SBATCH directive line 2: give one name"),
        (["#SBATCH --qos="], "invalid value '' for --qos.*non-empty"),
        (["#SBATCH --queue='a b'"], "invalid value 'a b' for --queue.*expected a name"),
        (["#SBATCH --reservation=r1,r2"], "invalid value 'r1,r2' for --reservation"),
        (["#SBATCH --array=5-1"], "invalid value '5-1' for --array in #SBATCH directive line 2: range '5-1' ends"),
        (["#SBATCH -a x"], "invalid value 'x' for -a (--array).*bad item 'x'.*0-99%8"),
        (["#SBATCH --array=1-3%0"], "invalid value '1-3%0' for --array.*after '%' must be a positive integer"),
        (["#SBATCH --array=%4"], "invalid value '%4' for --array.*no indexes before '%'"),
        (["#SBATCH --array=0-8:0"], "invalid value '0-8:0' for --array.*step in '0-8:0' must be at least 1"),
        (["#SBATCH --array=1,,2"], "invalid value '1,,2' for --array.*bad item ''"),
        (["#SBATCH -d afterok"], "invalid value 'afterok' for -d (--dependency).*'afterok' needs at least one job"),
        (["#SBATCH -d aftercorr:1"], "invalid value 'aftercorr:1' for -d (--dependency).*unknown dependency"),
        (["#SBATCH -d afterok:1,afterok:2?afterok:3"], "either ',' (all) or '?' (any)"),
        (["#SBATCH -d afterok:x"], "invalid value 'afterok:x' for -d (--dependency).*bad job id 'x'"),
        (["#SBATCH -d afterok:1+soon"], "bad time '+soon'"),
        (["#SBATCH --signal=FOO"], "invalid value 'FOO' for --signal in #SBATCH directive line 2: unknown signal"),
        (["#SBATCH --signal=R:USR1"], "invalid value 'R:USR1' for --signal.*unsupported flag 'R'"),
        (["#SBATCH --signal=USR1@soon"], "invalid value 'USR1@soon' for --signal.*whole seconds"),
        (["#SBATCH --signal=99"], "signal number 99 is not between 1 and 64"),
        (["#SBATCH --hold=yes"], "option '--hold' takes no value in #SBATCH directive line 2"),
        (["#SBATCH -H1"], "option '-H' takes no value"),
        (["#SBATCH --requeue=no"], "invalid value 'no' for --requeue.*the only value --requeue takes is 'expedite'"),
        (["#SBATCH --mem=1G --mem-per-cpu=1G"],
         "--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive (got --mem and --mem-per-cpu in #SBATCH"),
        (["#SBATCH --mem=1G", "#SBATCH --mem-per-gpu=1G"], "mutually exclusive.*directive line 3"),
    ],
)
def test_script_errors(lines, message):
    with pytest.raises(DirectiveError) as info:
        from_script(*lines)
    for part in message.split(".*"):
        assert part in str(info.value)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["--foo=1"], "unrecognized option '--foo' on the command line"),
        (["--nodes=x"], "invalid value 'x' for --nodes on the command line"),
        (["script.sh"], "unexpected argument 'script.sh' on the command line"),
        (["--mem=1G", "--mem-per-gpu=2G"], "mutually exclusive"),
    ],
)
def test_command_line_errors(tokens, message):
    with pytest.raises(DirectiveError) as info:
        from_cli(*tokens)
    assert message in str(info.value)


def test_plain_string_script_tokens_get_a_generic_location():
    with pytest.raises(DirectiveError, match="unrecognized option '--foo' in #SBATCH directives"):
        build_submission(["--foo"], [])


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["--gpu-per-node=1"],
         "unrecognized option '--gpu-per-node' on the command line; did you mean '--gpus-per-node'?"),
        (["--partion", "gpu"], "unrecognized option '--partion' on the command line; did you mean '--partition'?"),
        (["--bogus"], "unrecognized option '--bogus' on the command line"),  # nothing near enough to suggest
        (["-y"], "unrecognized option '-y' on the command line"),
        # Slurm's sbatch options that corral submit does not take are known: unsupported, not unknown.
        (["--input=x"], "unsupported option '--input' on the command line"),
        (["--open-m=append"], "unsupported option '--open-m' (--open-mode) on the command line"),
        (["--cluster=x"], "unsupported option '--cluster' on the command line"),  # an alias of --clusters
        (["-F", "f"], "unsupported option '-F' on the command line"),
    ],
)
def test_options_outside_the_table(tokens, message):
    with pytest.raises(DirectiveError) as info:
        from_cli(*tokens)
    assert str(info.value) == message


def test_an_unknown_directive_gets_a_suggestion_with_its_line():
    with pytest.raises(DirectiveError) as info:
        from_script("#SBATCH -N 1", "#SBATCH --ntask-per-node=2")
    assert str(info.value) == ("unrecognized option '--ntask-per-node' in #SBATCH directive line 3; "
                               "did you mean '--ntasks-per-node'?")


def test_without_known_options_everything_outside_the_table_is_unrecognized():
    from corral.jobscript import Opt, parse_args

    with pytest.raises(DirectiveError, match="^unrecognized option '--exclusive'$"):
        parse_args(["--exclusive"], [Opt("nodes", "N", REQUIRED)])
    with pytest.raises(DirectiveError, match="^unsupported option '--exclusive'$"):
        parse_args(["--exclusive"], [Opt("nodes", "N", REQUIRED)], known=[Opt("exclusive", arg=REQUIRED)])


def test_flag_options_refuse_values():
    from corral.jobscript import Opt, parse_args

    flags = [Opt("json"), Opt("help", short="h")]
    with pytest.raises(DirectiveError, match="option '--json' takes no value"):
        parse_args(["--json=yes"], flags)
    with pytest.raises(DirectiveError, match="option '-h' takes no value"):
        parse_args(["-hx"], flags)
    parsed = parse_args(["--js", "-h", "file", "--json"], flags)
    assert [p.option.key for p in parsed.options] == ["json", "help"]
    assert parsed.positionals == ["file", "--json"]  # options end at the first positional
    assert not parsed.saw_double_dash


def test_double_dash_ends_options():
    from corral.jobscript import SUBMIT_OPTION_TABLE, parse_args

    parsed = parse_args(["-N", "2", "--", "-N", "3"], SUBMIT_OPTION_TABLE)
    assert parsed.saw_double_dash and parsed.positionals == ["-N", "3"]
    assert parse_args(["-"], SUBMIT_OPTION_TABLE).positionals == ["-"]  # a lone dash is a positional
