import json

from corral.cli.client import PAGE_JOBS
from corral.cli.render import QUEUE_FIELDS
from corral.jobscript import format_duration

from .standin import T0, make_job

# The stand-in sends whole records whatever `fields` asks, as a controller without `fields=` does.
LINE_FIELDS = ",".join(QUEUE_FIELDS)


def lines_of(text):
    return [line.split() for line in text.strip().splitlines()]


def test_queue_table_shows_active_jobs(standin, cli):
    result = cli("queue")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["JOBID", "PARTITION", "NAME", "USER", "STATE", "TIME", "NODES", "GPUS",
                              "NODELIST(REASON)"]
    assert rows[0].split() == ["1", "gpu", "train", "alice", "RUNNING", "5:03", "2", "8", "node[1-2]"]
    assert rows[1].split()[:8] == ["2", "gpu", "big", "bob", "PENDING", "0:00", "1", "16"]
    assert "(Resources) est. start" in rows[1]
    assert len(rows) == 2  # finished jobs are left out
    assert standin.state.queries[-1] == ("/jobs", {"combine_arrays": "true", "fields": LINE_FIELDS,
                                                   "columns": "true", "limit": str(PAGE_JOBS)})


def test_queue_all_and_filters_reach_the_server(standin, cli):
    result = cli("queue", "--all", "--user", "bob", "-t", "failed,pending")
    assert result.exit_code == 0, result.output
    assert standin.state.queries[-1] == ("/jobs", {"all": "true", "user": "bob", "states": "FAILED,PENDING",
                                                   "combine_arrays": "true", "fields": LINE_FIELDS,
                                                   "columns": "true", "limit": str(PAGE_JOBS)})
    assert [r[0] for r in lines_of(result.stdout)[1:]] == ["2", "4"]


def test_queue_json_is_the_api_objects(standin, cli):
    result = cli("queue", "--json")
    assert result.exit_code == 0
    jobs = json.loads(result.stdout)
    assert [j["id"] for j in jobs] == [1, 2]
    assert jobs[0]["slices"][0]["gpus"] == [0, 1, 2, 3]


def test_queue_without_auth_explains(standin, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_SECRET", "wrong")
    result = cli("queue")
    assert result.exit_code == 1
    assert "corral: error: the controller refused the request (missing or wrong bearer token)" in result.stderr
    assert "secret" in result.stderr


def add_array_tasks(state):
    """Array job 20: task 0 running, task 1 pending on a quota with a detail, task 2 pending."""
    state.jobs[20] = make_job(20, name="sweep", state="RUNNING", reason="None", nodelist="node1", array_job_id=20,
                              array_task_id=0, array_throttle=2, account="hep", qos="high", queue="hep-q")
    state.jobs[21] = make_job(21, name="sweep", array_job_id=20, array_task_id=1, array_throttle=2, account="hep",
                              qos="high", queue="hep-q", reason="QueueQuota",
                              reason_detail="queue hep-q: gpu 8/8 in use, cohort all has none to lend")
    state.jobs[22] = make_job(22, name="sweep", array_job_id=20, array_task_id=2, reason="JobArrayTaskLimit")


def test_queue_names_array_tasks(standin, cli):
    add_array_tasks(standin.state)
    result = cli("queue")
    assert result.exit_code == 0, result.output
    rows = lines_of(result.stdout)[1:]
    assert [r[0] for r in rows] == ["1", "2", "20_0", "20_[1-2%2]"]  # pending tasks share a row, as in squeue
    assert rows[3][-1] == "(QueueQuota,JobArrayTaskLimit)"  # the detail waits for --long
    assert "gpu 8/8" not in result.stdout


def test_queue_folds_pending_array_tasks_as_squeue(standin, cli):
    for task in range(10):
        running = task < 3
        standin.state.jobs[30 + task] = make_job(
            30 + task, name="sweep", array_job_id=30, array_task_id=task, array_throttle=3,
            state="RUNNING" if running else "PENDING", reason="None" if running else "JobArrayTaskLimit",
            nodelist="node1" if running else "")
    result = cli("queue", "--user", "alice")
    assert result.exit_code == 0, result.output
    rows = lines_of(result.stdout)[1:]
    assert [r[0] for r in rows] == ["1", "30_0", "30_1", "30_2", "30_[3-9%3]"]
    assert rows[-1][4:] == ["PENDING", "0:00", "1", "0", "(JobArrayTaskLimit)"]
    assert [r[0] for r in lines_of(cli("queue", "-l").stdout)[1:]][-1] == "30_[3-9%3]"
    assert len(json.loads(cli("queue", "--json").stdout)) == 12  # JSON stays the API's records, one per task
    assert "combine_arrays" not in standin.state.queries[-1][1]  # the table asks the controller to fold them


def test_queue_long_adds_account_qos_queue_and_detail(standin, cli):
    add_array_tasks(standin.state)
    result = cli("queue", "-l")
    assert result.exit_code == 0, result.output
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["JOBID", "PARTITION", "NAME", "USER", "ACCOUNT", "QOS", "QUEUE", "STATE", "TIME",
                              "NODES", "GPUS", "NODELIST(REASON)", "DETAIL"]
    assert rows[0].split() == ["1", "gpu", "train", "alice", "-", "-", "-", "RUNNING", "5:03", "2", "8", "node[1-2]"]
    assert rows[3].split()[:12] == ["20_[1-2%2]", "gpu", "sweep", "alice", "hep", "high", "hep-q", "PENDING", "0:00",
                                    "1", "0", "(QueueQuota,JobArrayTaskLimit)"]
    assert rows[3].endswith("queue hep-q: gpu 8/8 in use, cohort all has none to lend")
    assert cli("queue", "--long").stdout == result.stdout


def test_acct_names_array_tasks(standin, cli):
    """As sacct -j: an array's id is every task, `A_I` one task, and a task's own id that task."""
    add_array_tasks(standin.state)
    for ids, rows in (("20", ["20_0", "20_1", "20_2"]), ("20_2,21", ["20_1", "20_2"]), ("20_[0-1]", ["20_0", "20_1"])):
        result = cli("acct", "-j", ids)
        assert result.exit_code == 0, result.output
        assert [r[0] for r in lines_of(result.stdout)[1:]] == rows
        assert standin.state.queries[-1] == ("/accounting", {"ids": ids, "limit": str(PAGE_JOBS)})


def test_show_array_task_reason_detail_and_policy(standin, cli):
    add_array_tasks(standin.state)
    result = cli("show", "21")
    assert result.exit_code == 0, result.output
    fields = {k.strip(): v for k, v in (line.split(" : ", 1) for line in result.stdout.splitlines())}
    assert fields["JobId"] == "21" and fields["ArrayJobId"] == "20" and fields["ArrayTaskId"] == "1"
    assert fields["ArrayTaskThrottle"] == "2"
    assert fields["Reason"] == "QueueQuota"
    assert fields["ReasonDetail"] == "queue hep-q: gpu 8/8 in use, cohort all has none to lend"
    assert (fields["Account"], fields["QOS"], fields["Queue"]) == ("hep", "high", "hep-q")
    assert fields["Held"] == "no" and fields["Requeue"] == "yes" and fields["Dependency"] == "(none)"


def test_show_prints_the_history(standin, cli):
    standin.state.jobs[1]["history"] = [
        {"t": T0 + 60, "event": "signal", "signal": "USR1"},
        {"t": T0 + 120, "event": "preempted", "by": 9, "cause": "reclaim"},
        {"t": T0 + 121, "event": "requeued", "reason": "preempted"},
    ]
    result = cli("show", "1")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("History:")
    events = [line.split(None, 1)[1] for line in lines[start + 1:]]
    assert events == ["signal USR1 sent", "preempted by job 9 (reclaim)", "requeued (preempted)"]
    assert all(line.startswith("  20") for line in lines[start + 1:])


def test_show_without_history_prints_none(standin, cli):
    assert "History" not in cli("show", "2").stdout


def test_show_lists_every_field(standin, cli):
    result = cli("show", "1")
    assert result.exit_code == 0, result.output
    fields = dict(line.split(" : ", 1) for line in result.stdout.splitlines())
    fields = {k.strip(): v for k, v in fields.items()}
    assert fields["JobId"] == "1"
    assert fields["JobName"] == "train"
    assert fields["State"] == "RUNNING"
    assert fields["NodeList"] == "node[1-2]"
    assert fields["Alloc[node1]"] == "gpus=0,1,2,3 cpus=8 mem=16G"
    assert fields["TimeLimit"] == "01:00:00"
    assert fields["RunTime"] == "00:05:03"
    assert fields["EndTime"] == "Unknown"
    assert fields["StdErr"] == "/home/alice/slurm-1.out"
    assert fields["ExitCode"] == "0:0"


def show_fields(cli, job_id):
    result = cli("show", str(job_id))
    assert result.exit_code == 0, result.output
    return {k.strip(): v for k, v in (line.split(" : ", 1) for line in result.stdout.splitlines() if " : " in line)}


def test_show_expands_output_patterns_as_the_agent_names_the_files(standin, cli):
    standin.state.jobs[41] = make_job(
        41, name="sweep", state="RUNNING", reason="None", nodelist="node[2-3]", array_job_id=40, array_task_id=1,
        slices=[{"node": "node2", "gpus": [], "cpus": 1, "mem_mib": 0}, {"node": "node3", "gpus": [], "cpus": 1,
                                                                       "mem_mib": 0}],
        output="logs/%x-%j_%A_%a.%N.%t.out", error="/scratch/%u/%%j-%5j-%J.err")
    fields = show_fields(cli, 41)
    assert fields["StdOut"] == "/home/alice/logs/sweep-41_40_1.node2.0.out"
    assert fields["StdErr"] == "/scratch/alice/%j-00041-41.batch.err"


def test_show_names_no_output_file_for_a_corral_run_job(standin, cli):
    """`corral run` (srun outside a job) makes an allocation whose steps' output goes to srun: no file
    named by its output pattern ever exists, so none is named (scontrol shows no StdOut for it either)."""
    standin.state.jobs[43] = make_job(43, name="hostname", state="COMPLETED", allocation=True)
    fields = show_fields(cli, 43)
    assert "StdOut" not in fields and "StdErr" not in fields
    assert fields["Interactive"].startswith("yes: no output file")
    assert "StdOut" in show_fields(cli, 2) and "Interactive" not in show_fields(cli, 2)


def test_show_keeps_the_node_pattern_until_the_job_has_a_node(standin, cli):
    standin.state.jobs[2]["output"] = "%N-%j.out"
    assert show_fields(cli, 2)["StdOut"] == "/home/alice/%N-2.out"


def test_show_json_and_unknown_job(standin, cli):
    assert json.loads(cli("show", "3", "--json").stdout)["state"] == "COMPLETED"
    result = cli("show", "99")
    assert result.exit_code == 1
    assert result.stderr == "corral: error: job 99 not found\n"


def test_cancel(standin, cli):
    result = cli("cancel", "1", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "Cancelling job 1: its tasks are being stopped (COMPLETING), then it ends CANCELLED",
        "Cancelled job 2 (CANCELLED)"]
    assert standin.state.jobs[1]["state"] == "COMPLETING"


def test_cancel_unknown_fails_but_cancels_the_rest(standin, cli):
    result = cli("cancel", "99", "2")
    assert result.exit_code == 1
    assert "corral: error: job 99 not found" in result.stderr
    assert "Cancelled job 2" in result.stdout
    assert standin.state.jobs[2]["state"] == "CANCELLED"


def test_cancel_finished_job_is_not_an_error(standin, cli):
    result = cli("cancel", "3")
    assert result.exit_code == 0
    assert "job 3 not cancelled: job 3 already ended (COMPLETED)" in result.stderr


def test_cancel_needs_numeric_ids(standin, cli):
    result = cli("cancel", "abc")
    assert result.exit_code == 2  # a usage error


def test_nodes_table_and_json(standin, cli):
    result = cli("nodes")
    assert result.exit_code == 0, result.output
    rows = result.stdout.strip().splitlines()
    assert rows[0].split() == ["NODE", "STATE", "PARTITIONS", "CPUS(A/T)", "MEM(A/T)", "GPUS(A/T)", "GPU", "MODEL",
                               "FEATURES", "REASON", "ISOLATION"]
    assert rows[1].split() == ["node1", "allocated", "gpu", "8/16", "16G/64G", "4/4", "4x", "sim-gpu", "ib,nvme", "as",
                               "user,", "cgroup", "v2"]
    assert rows[2].split() == ["node2", "drained", "gpu,debug", "0/16", "0M/64G", "0/0", "-", "-", "bad", "fan",
                               "dev", "mode:", "as", "bob,", "no", "cgroups"]
    assert result.stderr == ("corral: 1 node runs jobs without cgroups (node2); node2: no cgroup v2: "
                             "/sys/fs/cgroup/corral-node2 is not on a cgroup v2 file system\n")
    assert [n["name"] for n in json.loads(cli("nodes", "--json").stdout)] == ["node1", "node2"]


def test_acct_defaults_to_own_jobs_since_midnight(standin, cli, monkeypatch):
    monkeypatch.setattr("corral.cli.jobs.current_user", lambda: "bob")
    result = cli("acct")
    assert result.exit_code == 0, result.output
    path, query = standin.state.queries[-1]
    assert path == "/accounting" and query["user"] == "bob" and set(query) == {"user", "since", "limit"}
    header, *rows = lines_of(result.stdout)
    assert header == ["JobID", "Name", "State", "Start", "End", "Elapsed", "Nodes", "GPUs", "GPU-seconds", "ExitCode"]
    assert [r[0] for r in rows] == ["2", "4"]
    assert rows[0][3:5] == ["Unknown", "Unknown"]
    assert rows[1][2] == "FAILED" and rows[1][5] == format_duration(300) and rows[1][-1] == "137:9"


def test_acct_options_reach_the_server(standin, cli):
    result = cli("acct", "--all-users", "--since", str(int(T0)), "--until", "2023-11-15T00:00:00",
                 "-s", "completed", "--json")
    assert result.exit_code == 0, result.output
    path, query = standin.state.queries[-1]
    assert query["since"] == str(int(T0)) and query["states"] == "COMPLETED" and "user" not in query
    assert int(query["until"]) > T0 - 86400 * 2
    assert [j["id"] for j in json.loads(result.stdout)] == [3]


def test_acct_with_job_ids_spans_all_users_and_time(standin, cli):
    result = cli("acct", "-j", "1,3")
    assert result.exit_code == 0, result.output
    assert standin.state.queries[-1] == ("/accounting", {"ids": "1,3", "limit": str(PAGE_JOBS)})
    assert "2424" in result.stdout  # GPU-seconds of job 1


def test_acct_bad_inputs(standin, cli):
    assert "invalid time 'yesterday-ish'" in cli("acct", "--since", "yesterday-ish").stderr
    assert "invalid job id 'x'" in cli("acct", "-j", "1,x").stderr


def test_bad_controller_url_is_one_line(isolated, cli, monkeypatch):
    cases = {"http://[::1": "Invalid IPv6 URL", "http://node1:99999": "Port out of range",
             "ftp://node1": "expected http://HOST:PORT", "http://": "expected http://HOST:PORT"}
    for url, why in cases.items():
        result = cli("queue", "--url", url)
        assert result.exit_code == 1, url
        assert result.stderr.startswith("corral: error: invalid controller URL ") and why in result.stderr, url
        assert result.stderr.count("\n") == 1 and "(from --url)" in result.stderr
    monkeypatch.setenv("CORRAL_URL", "http://[::1")
    assert "(from CORRAL_URL): Invalid IPv6 URL" in cli("nodes").stderr


def test_unreachable_controller(isolated, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_URL", "http://127.0.0.1:9")  # the discard port: nothing listens
    for command in (["queue"], ["nodes"], ["show", "1"], ["cancel", "1"], ["acct"], ["requeue", "1"], ["hold", "1"],
                    ["release", "1"], ["prio"], ["share"], ["queues"], ["tenancy", "show"], ["reservation", "list"],
                    ["reservation", "delete", "x"]):
        result = cli(*command)
        assert result.exit_code == 1
        assert result.stderr == ("corral: error: cannot reach the controller at http://127.0.0.1:9 "
                                 "(is 'corral up' running?)\n")
