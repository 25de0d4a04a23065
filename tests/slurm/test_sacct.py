"""sacct: field lists, widths, truncation, parsable output, steps, options (table tests)."""
from __future__ import annotations

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacct.fields import FIELDS, AcctView
from corral.slurm.sacct.format import Layout, cell, find_field, header_lines, parse_fields, render
from corral.slurm.sacct.opts import parse_sacct
from corral.slurm.sacct.output import sacct_output, select_jobs

from .builders import T0, job, running

VIEW = AcctView(T0, cluster="corral")


@pytest.mark.parametrize(("typed", "canonical"), [
    ("jobid", "JobID"), ("JOBIDRAW", "JobIDRaw"), ("state", "State"), ("st", "Start"), ("star", "Start"),
    ("nodelist", "NodeList"), ("exitcode", "ExitCode"), ("alloctres", "AllocTRES"), ("elapsed", "Elapsed"),
])
def test_field_names_match_prefixes_in_table_order(typed, canonical):
    assert find_field(typed).name == canonical


def test_unknown_field_is_an_error():
    with pytest.raises(SlurmCommandError) as caught:
        parse_fields("JobID,bogusfield")
    assert caught.value.stderr == 'sacct: error: Invalid field requested: "bogusfield"\n'


def test_width_applies_to_every_column_of_the_field():
    columns = parse_fields("state%5,state%9,state,jobid")
    assert [c.width for c in columns] == [9, 9, 9, -12]


@pytest.mark.parametrize(("spec", "value", "text"), [
    ("State", "CANCELLED by 0", "CANCELLED+ "),
    ("State%8", "CANCELLED by 0", "CANCELL+ "),
    ("State%-12", "CANCELLED by 0", "CANCELLED b+ "),
    ("State%20", "CANCELLED by 0", "      CANCELLED by 0 "),
    ("JobID", "123", "123          "),
    ("JobID%8", "123", "     123 "),
    ("Start%5", "2026-11-22T01:48:39", "2026- "),  # dates are cut without a mark
    ("Elapsed%3", "00:00:46", "00:00:46 "),  # durations overflow
    ("AllocCPUS%1", "16", "16 "),  # numbers overflow
    ("NodeList", None, "                "),
    ("JobID%0", "123", " "),
])
def test_cells(spec, value, text):
    assert cell(value, parse_fields(spec)[0]) == text


def test_headers():
    layout = Layout(parse_fields("JobID,JobName%-5,State"))
    assert header_lines(layout) == ["JobID        JobNa      State ", "------------ ----- ---------- "]
    assert header_lines(Layout(parse_fields("JobID,State"), parsable="parsable")) == ["JobID|State|"]
    assert header_lines(Layout(parse_fields("JobID,State"), parsable="parsable2", delimiter="::")) == ["JobID::State"]


STEPPED = running(5, nodes=("n1", "n2"), gpus_per_node=2, account="lab", steps=[
    {"step_id": "batch", "name": "batch", "state": "RUNNING", "exit_code": 0, "exit_signal": 0,
     "start_time": T0 - 65, "end_time": None, "nodelist": "n1", "num_tasks": 1},
    {"step_id": "0", "name": "python", "state": "COMPLETED", "exit_code": 0, "exit_signal": 0,
     "start_time": T0 - 60, "end_time": T0 - 30, "nodelist": "n[1-2]", "num_tasks": 2},
])


def test_job_and_step_rows():
    layout = Layout(parse_fields("JobID,JobName,State,Elapsed,NodeList,AllocTRES%40,NTasks,Account"),
                    parsable="parsable2")
    assert render([STEPPED], layout, VIEW).splitlines() == [
        "JobID|JobName|State|Elapsed|NodeList|AllocTRES|NTasks|Account",
        "5|train|RUNNING|00:01:05|n[1-2]|billing=2,cpu=2,gres/gpu=4,node=2||lab",
        "5.batch|batch|RUNNING|00:01:05|n1|cpu=1,gres/gpu=2,mem=0,node=1|1|lab",
        "5.0|python|COMPLETED|00:00:30|n[1-2]|cpu=2,gres/gpu=4,mem=0,node=2|2|lab",
    ]
    assert len(render([STEPPED], layout.replace(steps=False), VIEW).splitlines()) == 2


@pytest.mark.parametrize(("record", "fields", "row"), [
    (job(1), "NodeList,Start,End,Elapsed", "None assigned|Unknown|Unknown|00:00:00"),
    (job(1, state="CANCELLED", cancelled_by_uid=0, end_time=T0), "State,Start,Timelimit",
     "CANCELLED by 0|None|01:00:00"),
    (job(1, state="CANCELLED", time_limit_s=None, end_time=T0), "Timelimit,TimelimitRaw",
     "Partition_Limit|Partition_Limit"),
    (job(1, state="FAILED", exit_code=3, start_time=T0 - 10, end_time=T0, time_limit_s=None),
     "ExitCode,Timelimit,TimelimitRaw", "3:0|UNLIMITED|UNLIMITED"),
    (job(1, time_limit_s=90), "TimelimitRaw", "2"),
    (job(1, mem_per_node_mib=64000, num_nodes=2), "ReqMem", "125G"),
    (job(1, held=True), "Eligible,Reason", "Unknown|Priority"),
    (job(1, array_job_id=1, array_task_spec="2-5%2"), "JobID,JobIDRaw", "1_[2-5%2]|1"),
    (running(9, array_job_id=1, array_task_id=0), "JobID,JobIDRaw,CPUTimeRAW", "1_0|9|65"),
    (job(1), "Cluster,User,UID,Group,Partition,Priority", "corral|ada|1000|ada|gpu|100"),
    (job(1), "MaxRSS,Comment,QOS", "||"),
])
def test_job_values(record, fields, row):
    layout = Layout(parse_fields(fields), parsable="parsable2", header=False)
    assert render([record], layout, VIEW) == row + "\n"


def test_every_field_renders_for_jobs_and_steps():
    layout = Layout(parse_fields(",".join(f.name for f in FIELDS)))
    lines = render([STEPPED, job(2)], layout, VIEW).splitlines()
    assert len(lines) == 2 + 4
    assert len({len(line) for line in lines[:2]}) == 1


@pytest.mark.parametrize(("argv", "check"), [
    (["-j", "12", "-j", "15,16"], lambda o: [(r.job_id, r.tasks) for r in o.job_ids] == [(12, None), (15, None),
                                                                                           (16, None)]),
    (["-j", "12_3,12_[4-5,7],13.batch"], lambda o: [(r.job_id, r.tasks, r.step) for r in o.job_ids] == [
        (12, ((3, 3),), None), (12, ((4, 5), (7, 7)), None), (13, None, "batch")]),
    (["-P"], lambda o: o.layout.parsable == "parsable2"),
    (["-p", "--delimiter=,"], lambda o: (o.layout.parsable, o.layout.delimiter) == ("parsable", ",")),
    (["-n", "-X"], lambda o: not o.layout.header and not o.layout.steps),
    (["-o", "jobid", "-o", "state"], lambda o: [c.field.name for c in o.layout.columns] == ["JobID", "State"]),
    (["--format=JobID,JobName%20"], lambda o: [c.width for c in o.layout.columns] == [-12, 20]),
    (["-b"], lambda o: [c.field.name for c in o.layout.columns] == ["JobID", "State", "ExitCode"]),
    (["-l"], lambda o: len(o.layout.columns) > 40),
    (["-s", "CD,f"], lambda o: o.job_states == frozenset({"COMPLETED", "FAILED"})),
    (["-a", "-u", "ada", "--partition=gpu", "--name=x", "-A", "lab", "-q", "high"],
     lambda o: o.all_users and (o.users, o.partitions, o.names, o.accounts, o.qos) == (
         ("ada",), ("gpu",), ("x",), ("lab",), ("high",))),
    (["-M", "all", "-S", "2026-01-01", "-E", "now"], lambda o: (o.start_text, o.end_text) == ("2026-01-01", "now")),
    (["-T"], lambda o: o.warnings == (
        "sacct: warning: --truncate is ignored by corral: times are not truncated to the window\n",)),
    (["-e"], lambda o: o.action == "helpformat"),
])
def test_options(argv, check):
    assert check(parse_sacct(argv, {}))


def test_sacct_format_variable():
    options = parse_sacct([], {"SACCT_FORMAT": "JobID,State"})
    assert [c.field.name for c in options.layout.columns] == ["JobID", "State"]


@pytest.mark.parametrize(("argv", "stderr"), [
    (["junk", "more"], "sacct: error: Unknown arguments:\nsacct: error:  junk\nsacct: error:  more\n"),
    (["--bogus"], "sacct: unrecognized option '--bogus'\n"),  # no "Try --help" line in sacct
    (["-j", "abc"], "sacct: fatal: Bad job/step specified: abc\n"),
    # int() reads "1_5" as 15 and takes other scripts' digits: each would select another job.
    *((["-j", f"12,{bad}"], f"sacct: fatal: Bad job/step specified: {bad}\n")
      for bad in ("1_5_3", "15__2", "+3", " 3", "0x10", "1e3", "\u0663", "-1", "0", "14+0", "12_[1-3].batch",
                  "9223372036854775808")),
    (["-s", "bogus"], "sacct: fatal: unrecognized job state value 'bogus'\n"),
    (["--json"], "sacct: error: --json is not supported by corral\n"),
])
def test_option_errors(argv, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        parse_sacct(argv, {})
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, 1)


def test_selection_defaults_to_the_callers_jobs_without_ids():
    jobs = [job(1), job(2, user="bob"), job(3, array_job_id=3, array_task_spec="1-2"),
            running(4, array_job_id=3, array_task_id=0)]
    assert [j["id"] for j in select_jobs(parse_sacct([], {}), jobs, user="bob")] == [2]
    assert [j["id"] for j in select_jobs(parse_sacct(["-j", "3"], {}), jobs, user="bob")] == [4, 3]
    assert [j["id"] for j in select_jobs(parse_sacct(["-j", "3_0"], {}), jobs, user="bob")] == [4]
    assert [j["id"] for j in select_jobs(parse_sacct(["-j", "3_2"], {}), jobs, user="bob")] == [3]  # in 1-2
    assert [j["id"] for j in select_jobs(parse_sacct(["-j", "4_0"], {}), jobs, user="bob")] == []  # 4: no array
    assert [j["id"] for j in select_jobs(parse_sacct(["-a"], {}), jobs, user="bob")] == [1, 2, 4, 3]
    assert [j["id"] for j in select_jobs(parse_sacct(["-s", "R"], {}), jobs, user="ada")] == [4]


def test_pending_array_tasks_collapse_like_slurms_remainder_record():
    tasks = [job(20 + t, array_job_id=10, array_task_id=t, array_throttle=2) for t in (3, 4, 5)]
    out = sacct_output(parse_sacct(["-X", "-P", "-o", "JobID,JobIDRaw,NodeList", "-j", "10"], {}), tasks, T0)[0]
    assert out == "JobID|JobIDRaw|NodeList\n10_[3-5%2]|10|None assigned\n"


def test_output():
    out, err, code = sacct_output(parse_sacct(["-X", "-P", "-o", "JobID,State"], {}), [job(1)], T0, user="ada")
    assert (out, err, code) == ("JobID|State\n1|PENDING\n", "", 0)
