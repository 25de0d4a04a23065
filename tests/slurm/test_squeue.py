"""squeue: format specifications, fields, selection and options (table tests)."""
from __future__ import annotations

import pytest

from corral.jobref import parse_job_ref
from corral.slurm.common import jobids
from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.records import reason
from corral.slurm.squeue.fields import View
from corral.slurm.squeue.format import (
    DEFAULT_FORMAT,
    header_line,
    job_line,
    parse_format,
    parse_long_format,
    print_str,
)
from corral.slurm.squeue.opts import parse_squeue
from corral.slurm.squeue.output import squeue_output
from corral.slurm.squeue.select import combine_pending_array_tasks, expand_array_remainders, filter_jobs, sort_jobs

from .builders import T0, job, running

VIEW = View(T0)


@pytest.mark.parametrize(("text", "width", "right", "cut", "out"), [
    ("abc", 0, False, True, "abc"), ("abc", 5, False, True, "abc  "), ("abc", 5, True, True, "  abc"),
    ("abcdefgh", 5, False, True, "abcde"), ("abcdefgh", 5, True, True, "abcde"),
    ("abcdefgh", 5, True, False, "abcdefgh"), ("abcdefgh", 5, False, False, "abcde"),  # "%.5s" always cuts
    (None, 0, False, True, "(null)"), (None, 8, True, True, "  (null)"), (None, 3, False, True, "   "),
])
def test_print_str_is_printf(text, width, right, cut, out):
    assert print_str(text, width, right, cut) == out


@pytest.mark.parametrize(("spec", "header", "errors"), [
    (DEFAULT_FORMAT, "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)", 0),
    ("%i %j", "JOBID NAME", 0),
    ("id:%i|%5j|", "id:JOBID|NAME |", 0),  # prefix and suffixes print as they are
    ("%.3T", "STA", 0),
    ("%-4D %i", "%-4D JOBID", 1),  # squeue knows no "-": printed back, and an error
    ("%Q%%i", "PRIORITYJOBID", 0),  # runs of % separate nothing
    ("plain", "plain", 0),
])
def test_format_headers(spec, header, errors):
    fmt = parse_format(spec)
    assert header_line(fmt) == header
    assert len(fmt.errors) == errors


def test_all_letters_format_skips_unknown_letters_silently():
    fmt = parse_format("%all")
    assert not fmt.errors and header_line(fmt).startswith("ACCOUNT|TRES_PER_NODE|MIN_CPUS|")


@pytest.mark.parametrize(("spec", "header"), [
    ("JobID,Name", "JOBID               NAME                "),
    ("JobID:6,Name:.5", "JOBID  NAME"),
    ("jobarrayid:8|,state", "JOBID   |STATE               "),
    ("Bogus:4", ""),  # an invalid field prints only its suffix
])
def test_long_format_headers(spec, header):
    assert header_line(parse_long_format(spec)) == header


def test_long_format_reports_unknown_names():
    assert parse_long_format("JobID,Bogus").errors == ("squeue: error: Invalid job format specification: Bogus\n",)


@pytest.mark.parametrize(("record", "line"), [
    (job(7, reason="Resources"), "                 7       gpu    train      ada PD       0:00      1 (Resources)"),
    (running(8, nodes=("n1", "n2")), "                 8       gpu    train      ada  R       1:05      2 n[1-2]"),
    (job(9, array_job_id=9, array_task_spec="3-9%2", reason="JobArrayTaskLimit"),
     "         9_[3-9%2]       gpu    train      ada PD       0:00      1 (JobArrayTaskLimit)"),
    (job(10, state="FAILED", reason="None", exit_code=3, nodelist="n1"),
     "                10       gpu    train      ada  F       0:00      1 (NonZeroExitCode)"),
    (job(11, state="TIMEOUT", reason="None", start_time=T0 - 100, end_time=T0 - 40, nodelist="n1"),
     "                11       gpu    train      ada TO       1:00      1 (TimeLimit)"),
    (job(12, state="CANCELLED", reason="None"), "                12       gpu    train      ada CA       0:00      1 "),
    (job(13, name="a-very-long-name"),
     "                13       gpu a-very-l      ada PD       0:00      1 (Priority)"),
])
def test_default_format_lines(record, line):
    assert job_line(record, parse_format(DEFAULT_FORMAT), VIEW) == line


@pytest.mark.parametrize(("letter", "record", "value"), [
    ("l", job(1, time_limit_s=None), "UNLIMITED"),
    ("L", running(1, time_limit_s=3600), "58:55"),
    ("e", running(1, time_limit_s=3600), "2027-01-15T08:58:55"),
    ("e", running(1, time_limit_s=None), "NONE"),
    ("S", job(1, estimated_start=T0 + 60), "2027-01-15T08:01:00"),
    ("S", job(1), "N/A"),
    ("C", job(1, num_tasks=4, cpus_per_task=2), "8"),
    ("b", running(1, gpus_per_node=2), "gres:gpu:2"),
    ("k", job(1), "(null)"),
    ("k", job(1, comment="note"), "note"),
    ("p", job(1, priority=0xFFFFFFFF), "1.00000000000000"),
    ("B", running(1, nodes=("n3", "n4")), "n3"),
    ("B", job(1), "n/a"),
    ("r", job(1, held=True, reason="None"), "JobHeldUser"),
])
def test_field_values(letter, record, value):
    assert job_line(record, parse_format(f"%{letter}"), VIEW) == value


def test_failed_by_signal_names_it():
    assert reason(job(1, state="FAILED", reason="None", exit_signal=9)) == "RaisedSignal:9(Killed)"


def test_filter_defaults_to_unfinished_jobs_even_with_ids():
    jobs = [job(1), running(2), job(3, state="COMPLETED")]
    assert [j["id"] for j in filter_jobs(jobs)] == [1, 2]
    three = [parse_job_ref("3")]
    assert [j["id"] for j in filter_jobs(jobs, job_ids=three)] == []
    assert [j["id"] for j in filter_jobs(jobs, job_ids=three, job_states=frozenset({"COMPLETED"}))] == [3]


def test_filter_by_array_and_task():
    task = running(12, array_job_id=10, array_task_id=0)
    rest = job(10, array_job_id=10, array_task_spec="1-4")
    jobs = [task, rest, job(11)]
    def ids(*texts):
        return [j["id"] for j in filter_jobs(jobs, job_ids=[parse_job_ref(t, task_lists=True) for t in texts])]

    assert ids("10") == [12, 10]
    assert ids("10_3") == [10]
    assert ids("10_0") == [12]
    assert ids("10_[0,4]") == [12, 10]
    assert ids("12") == [12]
    assert ids("12_0", "11_0", "10_7") == []  # 12 is a task's own id, 11 no array; 10 has no task 7
    assert [j["id"] for j in filter_jobs(jobs, users=["1000"], names=["train"])] == [12, 10, 11]


def test_pending_tasks_of_an_array_print_as_one_line():
    tasks = [job(20 + t, array_job_id=10, array_task_id=t, array_throttle=2,
                 reason="Priority" if t == 3 else "JobArrayTaskLimit") for t in (2, 3, 4, 7)]
    rows = combine_pending_array_tasks([running(19, array_job_id=10, array_task_id=0), *tasks, job(30)])
    assert [jobids.job_id(r) for r in rows] == ["10_0", "10_[2-4,7%2]", "30"]
    assert rows[1]["reason"] == "JobArrayTaskLimit,Priority" and rows[1]["id"] == 10
    out = squeue_output(parse_squeue(["-h", "-o", "%i %K"], {}), tasks, T0)[0]
    assert out == "10_[2-4,7%2] 2-4,7%2\n"
    out = squeue_output(parse_squeue(["-h", "-r", "-o", "%i"], {}), tasks, T0)[0]
    assert out.split() == ["10_2", "10_3", "10_4", "10_7"]
    remainder = job(10, array_job_id=10, array_task_spec="5-6%2")
    assert jobids.job_id(combine_pending_array_tasks([remainder, tasks[0]])[0]) == "10_[2,5-6%2]"


def test_expand_array_remainder():
    rows = expand_array_remainders([job(10, array_job_id=10, array_task_spec="2-4%2")])
    assert [(r["array_task_id"], r["array_task_spec"]) for r in rows] == [(2, None), (3, None), (4, None)]


def test_default_sort_pending_first_then_priority():
    jobs = [running(1, priority=5), job(2, priority=1), job(3, priority=9), job(4, partition="a")]
    assert [j["id"] for j in sort_jobs(jobs)] == [4, 3, 2, 1]
    assert [j["id"] for j in sort_jobs(jobs, "-i")] == [4, 3, 2, 1]
    assert [j["id"] for j in sort_jobs(jobs, "z,i")] == [1, 2, 3, 4]  # unknown keys are skipped


@pytest.mark.parametrize(("argv", "env", "check"), [
    (["-h"], {}, lambda o: o.noheader),
    (["-l"], {}, lambda o: o.long_banner and "TIME_LIMI" in header_line(o.format)),
    (["-j", "5"], {}, lambda o: o.job_ids == (parse_job_ref("5"),) and o.single_job_id == 5),
    (["-j5_[1-2,4]"], {}, lambda o: [r.tasks for r in o.job_ids] == [((1, 2), (4, 4))]),
    (["--jobs=5_2,6"], {}, lambda o: [(r.job_id, r.tasks) for r in o.job_ids] == [(5, ((2, 2),)), (6, None)]
     and o.single_job_id is None),
    (["-t", "pd,R"], {}, lambda o: o.job_states == frozenset({"PENDING", "RUNNING"})),
    (["-t", "all"], {}, lambda o: "COMPLETED" in o.job_states),
    (["--start"], {}, lambda o: o.job_states == frozenset({"PENDING"}) and o.sort == "S"),
    ([], {"SQUEUE_FORMAT": "%i"}, lambda o: header_line(o.format) == "JOBID"),
    ([], {"SQUEUE_FORMAT2": "JobID:5"}, lambda o: header_line(o.format) == "JOBID"),
    (["-o", "%j"], {"SQUEUE_FORMAT": "%i"}, lambda o: header_line(o.format) == "NAME"),
    ([], {"SQUEUE_SORT": "-i", "SQUEUE_STATES": "R", "SLURM_TIME_FORMAT": "%H"},
     lambda o: o.sort == "-i" and o.job_states == frozenset({"RUNNING"}) and o.time_format == "%H"),
    (["-u", "ada,bob", "-p", "gpu", "-n", "x", "-q", "high", "-A", "lab"], {},
     lambda o: (o.users, o.partitions, o.names, o.qos, o.accounts) == (
         ("ada", "bob"), ("gpu",), ("x",), ("high",), ("lab",))),
    (["--me", "-r"], {}, lambda o: o.me and o.array),
    (["-M", "x"], {},
     lambda o: o.warnings == ("squeue: warning: --cluster is ignored by corral: corral runs one cluster\n",)),
    (["--usage"], {}, lambda o: o.action == "usage"),
])
def test_options(argv, env, check):
    assert check(parse_squeue(argv, env))


@pytest.mark.parametrize(("argv", "stderr"), [
    (["-j", "abc"], "squeue: error: Invalid job id: abc\n"),
    # squeue's strtol reads "12abc" as 12; corral refuses what is not an id, as int("1_5") == 15 shows why.
    *((["-j", f"5,{bad}"], f"squeue: error: Invalid job id: {bad}\n")
      for bad in ("12abc", "1_5_3", "15__2", "+3", " 3", "0x10", "1e3", "\u0663", "-1", "0", "12.0",
                  "9223372036854775808")),
    (["-o", "%i", "-l"], "squeue: fatal: Options -o(--format) and -l(--long) are mutually exclusive. "
                         "Please remove one and retry.\n"),
    (["-o", "%i", "-O", "jobid"], "squeue: error: -O (--Format) is incompatible with -o (--format)\n"),
    (["-O", "jobid", "-o", "%i"], "squeue: error: -o (--format) is incompatible with -O (--Format)\n"),
    (["-i", "0"], "squeue: error: --iterate=0\n\n"),
    (["-L", "x"], "squeue: error: --licenses is not supported by corral\n"),
    (["extra"], "squeue: error: Unrecognized option: extra\n"),
])
def test_option_errors(argv, stderr):
    with pytest.raises(SlurmCommandError) as caught:
        parse_squeue(argv, {})
    assert (caught.value.stderr, caught.value.exit_code) == (stderr, 1)


def test_output_with_me_and_unknown_single_job():
    options = parse_squeue(["--me", "-h", "-o", "%i"], {})
    assert squeue_output(options, [job(1), job(2, user="bob")], T0, user="ada") == ("1\n", "", 0)
    assert squeue_output(parse_squeue(["-j", "7"], {}), [job(1)], T0) == (
        "", "slurm_load_jobs error: Invalid job id specified\n", 1)


def test_output_node_filter_and_long_banner():
    options = parse_squeue(["-w", "n2", "-h", "-o", "%i"], {})
    assert squeue_output(options, [running(1, nodes=("n1",)), running(2, nodes=("n2", "n3"))], T0)[0] == "2\n"
    out = squeue_output(parse_squeue(["-l"], {}), [], T0)[0]
    assert out.splitlines()[1].startswith("             JOBID")


def test_reservation_filter_and_field():
    jobs = [job(1, reservation="maint"), job(2)]
    options = parse_squeue(["-R", "maint", "-h", "-o", "%i %v"], {})
    assert squeue_output(options, jobs, T0)[0] == "1 maint\n"
