"""scancel, scontrol and sinfo (table tests)."""
from __future__ import annotations

import pytest

from corral.jobref import ALL_TASKS, JobRef
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.scancel.opts import parse_scancel, parse_signal
from corral.slurm.scancel.targets import select_targets
from corral.slurm.scontrol.job import expand_path, render_jobs
from corral.slurm.scontrol.opts import parse_scontrol
from corral.slurm.scontrol.output import scontrol_show_output
from corral.slurm.scontrol.show import render_config, render_nodes, render_partitions, show_hostlist
from corral.slurm.sinfo.opts import parse_sinfo
from corral.slurm.sinfo.output import sinfo_output

from .builders import T0, job, node, partition, running


@pytest.mark.parametrize(("text", "number"), [("USR2", 12), ("SIGUSR2", 12), ("usr1", 10), ("TERM", 15), ("9", 9)])
def test_signals(text, number):
    assert parse_signal(text) == number


@pytest.mark.parametrize("text", ["BOGUS", "0", "SIG"])
def test_unknown_signals(text):
    with pytest.raises(SlurmCommandError) as caught:
        parse_signal(text)
    assert caught.value.stderr == f"Unknown job signal: {text}\n"


@pytest.mark.parametrize(("text", "ref"), [
    ("12", JobRef("12", 12)), ("12_4", JobRef("12_4", 12, ((4, 4),))),
    ("12_[1-3,7]", JobRef("12_[1-3,7]", 12, ((1, 3), (7, 7)))), ("12_*", JobRef("12_*", 12, ALL_TASKS)),
    ("12.0", JobRef("12.0", 12, None, "0")), ("12_4.batch", JobRef("12_4.batch", 12, ((4, 4),), "batch")),
])
def test_job_refs(text, ref):
    assert parse_scancel([text], {}).jobs == (ref,)


def test_job_lists_split_outside_brackets_as_scancel():
    assert [r.text for r in parse_scancel(["12,13_[1,3]", "14"], {}).jobs] == ["12", "13_[1,3]", "14"]


@pytest.mark.parametrize("bad", ["1_5_3", "15__2", "+3", " 3", "0x10", "1e3", "\u0663", "0", "12_[1-3].0",
                                 "12.", "12_[]", "12_[3-1]", "9223372036854775808"])
def test_ids_int_would_misread_are_refused(bad):
    """int("1_5") == 15 and int("\u0663") == 3: each would cancel another job."""
    with pytest.raises(SlurmCommandError) as caught:
        parse_scancel(["12", bad], {})
    assert caught.value.stderr == f"scancel: error: Invalid job id {bad}\n"


def test_signal_numbers_are_ascii():
    with pytest.raises(SlurmCommandError):
        parse_signal("\u0661\u0665")  # int() reads it as 15, SIGTERM


@pytest.mark.parametrize(("argv", "stderr"), [
    (["abc"], "scancel: error: Invalid job id abc\n"),
    ([], "scancel: error: No job identification provided\n"),
    (["-t", "bogus", "1"],
     "Invalid job state specified: bogus\nValid job states are PENDING, RUNNING, and SUSPENDED\n"),
    (["--s", "1"], "scancel: option '--s' is ambiguous; possibilities: '--sibling' '--signal' '--state'\n"
                   'Try "scancel --help" for more information\n'),
    (["-i", "1"], "scancel: error: --interactive is not supported by corral\n"),
])
def test_scancel_errors(argv, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        parse_scancel(argv, {})
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, 1)


JOBS = [running(12, array_job_id=10, array_task_id=0), job(10, array_job_id=10, array_task_spec="1-3"),
        running(20, name="x", nodes=("n2",)), job(21, state="COMPLETED"), job(22, user="bob")]


@pytest.mark.parametrize(("argv", "ids", "stderr", "code"), [
    (["10"], [12, 10], "", 0),
    (["10_2"], [10], "", 0),
    (["10_0"], [12], "", 0),
    (["10_*"], [12, 10], "", 0),
    (["10_[0-1]"], [12, 10], "", 0),
    (["21"], [], "", 0),  # finished: skipped silently
    (["21", "--signal", "USR2"], [], "scancel: error: Kill job error on job id 21: Invalid job id specified\n", 1),
    (["-n", "x"], [20], "", 0),
    (["-u", "bob"], [22], "", 0),
    (["-w", "n2"], [20], "", 0),
    (["20", "-t", "PD"], [], "scancel: error: Kill job error on job id 20: Invalid job id specified\n", 1),
    (["--me"], [12, 10, 20], "", 0),
])
def test_scancel_targets(argv, ids, stderr, code):
    targets, err, status = select_targets(parse_scancel(argv, {}), JOBS, user="ada")
    assert ([j["id"] for _, j in targets], err, status) == (ids, stderr, code)


def test_scancel_flags():
    options = parse_scancel(["-b", "-f", "-Q", "-v", "-s", "KILL", "1", "--clusters=all"], {})
    assert (options.batch, options.full, options.quiet, options.verbose, options.signal) == (True, True, True, 1, 9)
    assert parse_scancel(["1"], {"SCANCEL_PARTITION": "gpu"}).filters == {"partition": ("gpu",)}


@pytest.mark.parametrize(("argv", "keyword", "entity", "args"), [
    (["show", "job", "12"], "show", "jobs", ("12",)), (["sho", "jobs"], "show", "jobs", ()),
    (["show", "hostnames", "n[1-3]"], "show", "hostnames", ("n[1-3]",)),
    (["show", "hostname", "n1"], "show", "hostnames", ("n1",)), (["show", "hostn"], "show", "hostnames", ()),
    (["show", "hostlist", "a,b"], "show", "hostlist", ("a,b",)),
    (["show", "hostlistsorted", "a,b"], "show", "hostlistsorted", ("a,b",)),
    (["show", "part"], "show", "partitions", ()), (["show", "node", "n1"], "show", "nodes", ("n1",)),
    (["show", "config"], "show", "config", ()), (["requeue", "15_3"], "requeue", None, ("15_3",)),
    (["hold", "5"], "hold", None, ("5",)), (["release", "5"], "release", None, ("5",)),
])
def test_scontrol_commands(argv, keyword, entity, args):
    command = parse_scontrol(argv)
    assert (command.keyword, command.entity, command.args) == (keyword, entity, args)


def test_scontrol_options_may_follow_the_command():
    assert parse_scontrol(["show", "job", "-o", "5"]).one_liner
    assert parse_scontrol(["-dd", "show", "job"]).details == 2


@pytest.mark.parametrize(("argv", "stderr"), [
    (["bogus"], "invalid keyword: bogus\n"), (["sh", "job"], "invalid keyword: sh\n"),
    (["show"], "too few arguments for keyword:show\n"), (["show", "bogus"], "invalid entity:bogus for keyword:show \n"),
    (["requeue"], "too few arguments for keyword:requeue\n"),
    (["update"], "too few arguments for keyword:update\n"),
    (["suspend", "1"], "scontrol: error: suspend is not supported by corral\n"),
])
def test_scontrol_errors(argv, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        parse_scontrol(argv)
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, 1)


def show(argv, **kwargs):
    return scontrol_show_output(parse_scontrol(argv), now=T0, **kwargs)


def test_scontrol_show_outputs():
    assert show(["show", "hostnames", "n[1-2],x"]) == ("n1\nn2\nx\n", "", 0)
    assert show(["show", "hostnames"], env={"SLURM_NODELIST": "g[01-02]"}) == ("g01\ng02\n", "", 0)
    assert show(["show", "hostnames"]) == ("", "scontrol: error: host list is empty\n", 0)
    assert show(["show", "hostlist", "n3,n1,n2"]) == ("n[1-3]\n", "", 0)
    assert show(["show", "hostlist"]) == ("", "invalid encode argument\n", 1)
    assert show(["show", "job"]) == ("No jobs in the system\n", "", 0)
    assert show(["show", "job", "5"], jobs=[job(1)]) == ("", "slurm_load_jobs error: Invalid job id specified\n", 1)
    assert show(["show", "partition", "x"], partitions=[partition()]) == ("", "Partition x not found\n", 1)
    assert show(["show", "node", "x"], nodes=[node("n1")]) == ("", "Node x not found\n", 1)
    out = show(["show", "job", "10_2"], jobs=JOBS)[0]
    assert out.startswith("JobId=10 ArrayJobId=10 ArrayTaskId=1-3 JobName=train\n")


def test_scontrol_job_block():
    text = render_jobs([running(7, nodes=("n1", "n2"), gpus_per_node=2, comment="note", submit_host="login")], T0)
    lines = text.splitlines()
    assert lines[0] == "JobId=7 JobName=train"
    assert "   UserId=ada(1000) GroupId=ada(1000) MCS_label=N/A" in lines
    assert "   JobState=RUNNING Reason=None Dependency=(null)" in lines
    assert "   RunTime=00:01:05 TimeLimit=01:00:00 TimeMin=N/A" in lines
    assert "   NodeList=n[1-2]" in lines and "   BatchHost=n1" in lines
    assert "   TRES=cpu=2,node=2,billing=2,gres/gpu=4" in lines
    assert "   Partition=gpu AllocNode:Sid=login:0" in lines
    assert "   Comment=note " in lines and "   TresPerNode=gres:gpu:2" in lines
    assert "   StdOut=/home/ada/slurm-7.out" in lines
    assert text.endswith("   Power=\n   TresPerNode=gres:gpu:2\n   \n\n")
    one = render_jobs([job(3)], T0, one_liner=True)
    assert one.startswith("JobId=3 JobName=train UserId=ada(1000)") and one.endswith("Power= \n")


def test_scontrol_job_shows_the_nodes_it_chose():
    lines = render_jobs([job(3, req_nodelist="n[1-2]", exc_nodelist="n3", constraint="ib&h100", exclusive=True)],
                        T0).splitlines()
    assert "   ReqNodeList=n[1-2] ExcNodeList=n3" in lines
    assert "   Features=ib&h100 DelayBoot=00:00:00" in lines
    assert "   OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null)" in lines
    plain = render_jobs([job(4)], T0).splitlines()
    assert "   ReqNodeList=(null) ExcNodeList=(null)" in plain and "   Features=(null) DelayBoot=00:00:00" in plain

def test_scontrol_shows_no_files_for_an_allocation():
    """srun outside a job and salloc make jobs with Slurm's batch_flag 0: no StdErr, StdIn or StdOut."""
    lines = render_jobs([running(8, allocation=True)], T0).splitlines()
    assert not any(line.lstrip().startswith(("StdErr=", "StdIn=", "StdOut=")) for line in lines)
    assert any(" BatchFlag=0 " in line for line in lines) and "   Power=" in lines
    assert any(" BatchFlag=1 " in line for line in render_jobs([running(9)], T0).splitlines())


@pytest.mark.parametrize(("pattern", "record", "path"), [
    ("slurm-%j.out", job(5, workdir="/w"), "/w/slurm-5.out"),
    ("/o/%A_%a.out", job(9, array_job_id=5, array_task_id=2), "/o/5_2.out"),
    ("/o/%A_%a.out", job(5, array_job_id=5, array_task_spec="3-4"), "/o/5_4294967294.out"),
    ("/o/%x-%u-%%.log", job(5), "/o/train-ada-%.log"),
])
def test_output_paths(pattern, record, path):
    assert expand_path(pattern, record) == path


def test_partition_and_node_blocks():
    nodes = [node("n1", state="mixed", cpus_alloc=4, gpus_alloc=2), node("n2", state="drained", drain_reason="fan")]
    part = render_partitions([partition(max_time_s=86400, default_time_s=None)], nodes)
    assert "   DefaultTime=NONE DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO\n" in part
    assert "   MaxNodes=UNLIMITED MaxTime=1-00:00:00 MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED\n" in part
    assert "   TRES=cpu=32,mem=125G,node=2,billing=32,gres/gpu=16\n" in part
    text = render_nodes(nodes, T0)
    assert text.startswith("NodeName=n1 Arch=(null) CoresPerSocket=1 \n   CPUAlloc=4 CPUEfctv=16 CPUTot=16")
    assert "   State=IDLE+DRAIN ThreadsPerCore=1" in text and "   Reason=fan\n" in text
    assert "   AllocTRES=cpu=4,gres/gpu=2\n" in text


def test_config_lines():
    text = render_config([("ClusterName", "corral"), ("AccountingStorageExternalHost", "(null)")], T0, "%H")
    assert text.splitlines()[1:] == ["ClusterName             = corral", "AccountingStorageExternalHost = (null)"]


def test_hostlist_sorted():
    assert show_hostlist("n3,n1", sort=True) == "n[1,3]\n"


PARTS = [partition("gpu", ("n1", "n2", "n3")), partition("debug", ("n3",), default=False, max_time_s=1800)]
NODES = [node("n1", state="mixed", cpus_alloc=4), node("n2"), node("n3", state="down")]


@pytest.mark.parametrize(("argv", "out"), [
    ([], "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"  # states in Slurm's numeric order, descending
         "gpu*         up   infinite      1  down* n3\n"
         "gpu*         up   infinite      1    mix n1\n"
         "gpu*         up   infinite      1   idle n2\n"
         "debug        up      30:00      1  down* n3\n"),
    (["-h", "-o", "%P %D %C"], "gpu* 3 4/28/16/48\ndebug 1 0/0/16/16\n"),
    (["-p", "debug", "-o", "%R %l %a"], "PARTITION TIMELIMIT AVAIL\ndebug 30:00 up\n"),
    (["-t", "idle", "-h"], "gpu*         up   infinite      1   idle n2\n"),
    (["-d", "-h", "-o", "%N"], "n3\nn3\n"),
    (["-N", "-h"], "n1             1      gpu* mix   \nn2             1      gpu* idle  \n"
                   "n3             1      gpu* down* \nn3             1     debug down* \n"),
    (["-s", "-h"], "gpu*         up   infinite          1/1/1/3 n[1-3]\n"
                   "debug        up      30:00          0/0/1/1 n3\n"),
    (["-n", "n[1-2]", "-h", "-o", "%N %t"], "n1 mix\nn2 idle\n"),
])
def test_sinfo(argv, out):
    assert sinfo_output(parse_sinfo(argv, {}), PARTS, NODES, T0) == (out, "", 0)


def test_gres_shows_the_slurm_type_of_the_gpu_name():
    h100 = [{"index": i, "model": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "domain": None, "allocated_to": None}
            for i in range(8)]
    nodes = [node("n1"), node("n2")]
    nodes[0]["gpus"] = h100
    out, _, _ = sinfo_output(parse_sinfo(["-N", "-h", "-o", "%N %G"], {}), [partition("gpu", ("n1", "n2"))], nodes, T0)
    assert out == "n1 gpu:h100:8\nn2 gpu:8\n"  # the builder's model "sim" names no type: Slurm's untyped gpu:8
    assert "   Gres=gpu:h100:8\n" in render_nodes(nodes[:1], T0)


def test_features_split_sinfo_rows_by_f_and_show_in_scontrol():
    nodes = [node("n1"), node("n2"), node("n3")]
    nodes[0]["features"] = ["a100", "ib"]
    nodes[1]["features"] = ["a100", "ib"]
    parts = [partition("gpu", ("n1", "n2", "n3"))]
    out, _, _ = sinfo_output(parse_sinfo(["-h", "-o", "%P %D %f %N"], {}), parts, nodes, T0)
    assert out == "gpu* 2 a100,ib n[1-2]\ngpu* 1 (null) n3\n"
    # Without %f the rows do not split by features, as in sinfo.
    out, _, _ = sinfo_output(parse_sinfo(["-h", "-o", "%P %D"], {}), parts, nodes, T0)
    assert out == "gpu* 3\n"
    shown = render_nodes(nodes[:1], T0)
    assert "   AvailableFeatures=a100,ib\n   ActiveFeatures=a100,ib\n" in shown
    assert "   AvailableFeatures=(null)\n" in render_nodes(nodes[2:], T0)

def test_sinfo_options():
    assert parse_sinfo([], {"SINFO_FORMAT": "%P"}).format.columns[0].field.header == "PARTITION"
    assert parse_sinfo(["-l"], {}).long_banner
    with pytest.raises(SlurmCommandError) as caught:
        parse_sinfo(["-t", "bogus"], {})
    assert caught.value.stderr.startswith('sinfo: error: Bad state string: "bogus"\nsinfo: error: valid states:')
    with pytest.raises(SlurmCommandError) as caught:
        parse_sinfo(["--s"], {})
    assert caught.value.stderr.startswith(
        "sinfo: option '--s' is ambiguous; possibilities: '--summarize' '--sort' '--states'")
    assert parse_sinfo(["-o", "%Q"], {}).warnings == ("Invalid node format specification: Q\n",)


def test_sinfo_list_reasons_shows_each_down_or_drained_node_once_by_reason():
    xid = "XID 79 on GPU 2 (GPU has fallen off the bus)"
    nodes = [node("n1", state="drained", drain_reason=xid), node("n2"), node("n3", state="down"),
             node("n4", state="draining", cpus_alloc=4, drain_reason=xid)]
    parts = [partition("gpu", ("n1", "n2", "n3", "n4")), partition("debug", ("n1",), default=False)]
    out, _, _ = sinfo_output(parse_sinfo(["-R"], {}), parts, nodes, T0)
    assert out == ("REASON               USER      TIMESTAMP           NODELIST\n"
                   "XID 79 on GPU 2 (GPU Unknown   Unknown             n[1,4]\n"
                   "none                 Unknown   Unknown             n3\n")
    out, _, _ = sinfo_output(parse_sinfo(["-R", "-l", "-h"], {}), parts, nodes, T0)
    assert out.splitlines()[1:] == ["XID 79 on GPU 2 (GPU Unknown      Unknown             drain  n1",
                                    "none                 Unknown      Unknown             down*  n3",
                                    "XID 79 on GPU 2 (GPU Unknown      Unknown             drng   n4"], \
        "after the banner: one line per reason and state"
    out, _, _ = sinfo_output(parse_sinfo(["-R", "-h", "-o", "%N|%E", "-p", "debug"], {}), parts, nodes, T0)
    assert out == f"n1|{xid}\n"
