
import pytest

from corral.cli import render

from .standin import T0, canned_jobs, canned_nodes, make_job

pytestmark = pytest.mark.usefixtures("utc")  # local times shown in UTC (tests/conftest.py)


def test_queue_rows():
    jobs = canned_jobs()
    rows = render.queue_rows([jobs[1], jobs[2]], now=T0)
    assert rows[0] == ("1", "gpu", "train", "alice", "RUNNING", "5:03", "2", "8", "node[1-2]")
    assert rows[1] == ("2", "gpu", "big", "bob", "PENDING", "0:00", "1", "16", "(Resources) est. start 23:13:20")


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"reason": "Priority"}, "(Priority)"),
        ({"reason": "Resources", "estimated_start": T0 + 2 * 86400}, "(Resources) est. start 2023-11-16T22:13:20"),
        ({"reason": "Resources", "estimated_start": T0 + 60, "estimated_start_source": "forecast"},
         "(Resources) est. start 22:14:20 (forecast)"),
        ({"reason": "Dependency", "estimated_start": T0 + 60, "estimated_start_source": "forecast",
          "estimated_start_window": [T0 + 30, T0 + 3600]},
         "(Dependency) est. start 22:14:20 (forecast) window 22:13:50-23:13:20"),
        ({"state": "RUNNING", "nodelist": "node[1-4]"}, "node[1-4]"),
        ({"state": "RUNNING", "nodelist": "node[1-4]", "gpu_idle_flagged": True}, "node[1-4] (GPUs idle)"),
        ({"state": "CANCELLED", "reason": "None"}, "(None)"),
    ],
)
def test_nodelist_or_reason(overrides, text):
    assert render.nodelist_or_reason(make_job(9, **overrides), now=T0) == text


def test_node_rows():
    rows = render.node_rows(canned_nodes())
    assert rows[0] == ("node1", "allocated", "gpu", "8/16", "16G/64G", "4/4", "4x sim-gpu", "ib,nvme", "",
                       "as user, cgroup v2")
    assert rows[1] == ("node2", "drained", "gpu,debug", "0/16", "0M/64G", "0/0", "-", "-", "bad fan",
                       "dev mode: as bob, no cgroups")


def test_the_isolation_column_says_what_the_cgroups_enforce():
    node = dict(canned_nodes()[0], cgroups="cgroup v2 tracking + v1 memory, cpuset (v2 at /sys/fs/cgroup/unified/c; "
                "v1 memory at /sys/fs/cgroup/memory/c; v1 cpuset at /sys/fs/cgroup/cpuset/c); no GPU device limit: "
                "no v1 devices hierarchy")
    assert render.isolation(node) == "as user, cgroup v2 tracking + v1 memory, cpuset"
    assert render.isolation(dict(node, cgroups="cgroups off (--no-cgroups)")) == "as user, no cgroups"


def test_node_rows_show_the_slurm_type_and_the_full_gpu_name():
    node = canned_nodes()[0]
    node["gpus"] = [dict(g, model="NVIDIA H100 80GB HBM3") for g in node["gpus"][:3]] + \
        [dict(node["gpus"][3], model="NVIDIA A100-SXM4-80GB")]
    assert render.node_rows([node])[0][6] == "3x h100 (NVIDIA H100 80GB HBM3), 1x a100 (NVIDIA A100-SXM4-80GB)"


def test_acct_rows():
    jobs = canned_jobs()
    assert render.acct_rows([jobs[3], jobs[2]]) == [
        ("3", "old", "COMPLETED", "2023-11-14T20:13:20", "2023-11-14T21:13:20", "01:00:00", "1", "1", "3600", "0:0"),
        ("2", "big", "PENDING", "Unknown", "Unknown", "00:00:00", "1", "16", "0", "0:0"),
    ]


@pytest.mark.parametrize(("mib", "text"), [(0, "0M"), (512, "512M"), (1024, "1G"), (1536, "1.5G"),
                                           (16384, "16G"), (1024 * 1024, "1T"), (3 * 1024 * 1024 // 2, "1.5T")])
def test_format_mib(mib, text):
    assert render.format_mib(mib) == text


def test_format_table_aligns_and_trims():
    rows = [("1", "a", "10"), ("123", "long-name", "2")]
    lines = render.format_table(("ID", "NAME", "N"), rows, right=frozenset({0, 2}))
    assert lines == [" ID  NAME        N", "  1  a          10", "123  long-name   2"]


def test_format_table_empty():
    assert render.format_table(("A", "BB"), []) == ["A  BB"]


def test_job_fields_cover_every_jobout_field():
    job = canned_jobs()[1]
    fields = dict(render.job_fields(job))
    assert fields["SubmitTime"] == "2023-11-14T22:13:20"
    assert fields["StartTime"] == "2023-11-14T22:13:30"
    assert fields["MemPerNode"] == "16G" and fields["TotalGpus"] == "8" and fields["GpuSeconds"] == "2424"
    assert "EstimatedStart" not in fields and "ArrayJobId" not in fields and "ReasonDetail" not in fields
    assert fields["Alloc[node2]"] == "gpus=0,1,2,3 cpus=8 mem=16G"
    pending = dict(render.job_fields(canned_jobs()[2]))
    assert pending["EstimatedStart"] == "2023-11-14T23:13:20" and pending["NodeList"] == "(none)"
    assert "EstimatedStartWindow" not in pending  # a reservation's estimate has no window
    forecast = {**canned_jobs()[2], "estimated_start_source": "forecast",
                "estimated_start_window": [T0 + 1800, T0 + 7200]}
    shown = dict(render.job_fields(forecast))
    assert shown["EstimatedStart"] == "2023-11-14T23:13:20 (forecast)"
    assert shown["EstimatedStartWindow"] == "2023-11-14T22:43:20 to 2023-11-15T00:13:20"


def test_job_fields_of_a_job_with_every_feature():
    job = make_job(21, array_job_id=20, array_task_id=1, array_throttle=4, account="hep", qos="high", queue="q",
                   reason="Dependency", reason_detail="waits for job 3 (afterok)", dependency="afterok:3", held=True,
                   requeue=False, reservation="maint", uid=1000, submit_host="login1",
                   history=[{"t": T0, "event": "requeued"}], gpu_share="shard:2", expedited_requeue=True,
                   req_nodelist="n[1-2]", exc_nodelist="n3", constraint="ib", exclusive=True,
                   container_image="/img/pt.tar", container_mounts="/data:/data:ro", container_workdir="/w",
                   container_name="env1", container_env="HF_HOME", container_mount_home=False,
                   container_remap_root=True)
    fields = dict(render.job_fields(job))
    assert {k: v for k, v in fields.items() if k.startswith("Container")} == {
        "ContainerImage": "/img/pt.tar", "ContainerMounts": "/data:/data:ro", "ContainerWorkdir": "/w",
        "ContainerName": "env1", "ContainerEnv": "HF_HOME", "ContainerMountHome": "no", "ContainerRemapRoot": "yes"}
    assert fields["GpuShare"] == "shard:2" and fields["ExpeditedRequeue"] == "yes"
    assert (fields["ReqNodeList"], fields["ExcNodeList"], fields["Features"], fields["Exclusive"]) == (
        "n[1-2]", "n3", "ib", "yes")
    assert {k: fields[k] for k in ("ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "Account", "QOS", "Queue",
                                   "ReasonDetail", "Dependency", "Held", "Requeue", "Reservation", "Uid",
                                   "SubmitHost")} == {
        "ArrayJobId": "20", "ArrayTaskId": "1", "ArrayTaskThrottle": "4", "Account": "hep", "QOS": "high",
        "Queue": "q", "ReasonDetail": "waits for job 3 (afterok)", "Dependency": "afterok:3", "Held": "yes",
        "Requeue": "no", "Reservation": "maint", "Uid": "1000", "SubmitHost": "login1"}
    # Every JobOut field shows up under some label (slices as Alloc[...] lines, history after the fields).
    covered = {"id", "name", "user", "state", "reason", "partition", "priority", "submit_time", "start_time",
               "end_time", "estimated_start", "estimated_start_source", "estimated_start_window", "time_limit_s",
               "elapsed_s", "num_nodes",
               "tasks_per_node",
               "num_tasks", "gpus_per_node", "cpus_per_task", "mem_per_node_mib", "total_gpus", "nodelist", "slices",
               "exit_code", "exit_signal", "gpu_seconds", "workdir", "output", "error", "restart_count", "account",
               "qos", "queue", "array_job_id", "array_task_id", "array_throttle", "dependency", "reason_detail",
               "held", "requeue", "expedited_requeue", "reservation", "uid", "submit_host", "history", "position",
               "comment", "wckey", "req_nodelist", "exc_nodelist", "constraint", "exclusive",
               "open_mode", "batch", "allocation", "gpu_share",
               "cancelled_by_uid", "steps", "array_task_spec", "usage",
               "container_image", "container_mounts", "container_workdir", "container_name", "container_env",
               "container_mount_home", "container_remap_root",
               "gpu_idle_flagged"}  # GpuIdle among the efficiency fields (tests/cli/test_efficiency.py)
    assert covered == set(job)
    assert render.history_lines(job) == ["History:", "  2023-11-14T22:13:20  requeued"]


def test_a_forecast_start_says_so():
    forecast = dict(render.job_fields(make_job(3, estimated_start=T0 + 60, estimated_start_source="forecast")))
    reserved = dict(render.job_fields(make_job(3, estimated_start=T0 + 60, estimated_start_source="reservation")))
    assert forecast["EstimatedStart"] == "2023-11-14T22:14:20 (forecast)"
    assert reserved["EstimatedStart"] == "2023-11-14T22:14:20"


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({}, "7"),
        ({"array_job_id": 5, "array_task_id": 2}, "5_2"),
        ({"array_job_id": 5}, "7"),  # not a task: its own id
    ],
)
def test_job_id_text(overrides, text):
    assert render.job_id_text(make_job(7, **overrides)) == text


def test_queue_long_rows():
    job = make_job(8, account="hep", reason="Reservation", reason_detail="reservation maint starts 23:00")
    assert render.queue_long_rows([job], now=T0) == [
        ("8", "gpu", "job8", "alice", "hep", "-", "-", "PENDING", "0:00", "1", "0", "(Reservation)",
         "reservation maint starts 23:00"),
    ]


@pytest.mark.parametrize(
    ("event", "text"),
    [
        ({"t": T0, "event": "preempted", "by": 9, "cause": "priority"}, "preempted by job 9 (priority)"),
        ({"t": T0, "event": "preempted"}, "preempted"),
        ({"t": T0, "event": "preempted", "by": 9, "cause": "reclaim", "grace_s": 60},
         "preempted by job 9 (reclaim) grace_s=60"),
        ({"t": T0, "event": "requeued", "reason": "scontrol requeue"}, "requeued (scontrol requeue)"),
        ({"t": T0, "event": "requeued"}, "requeued"),
        ({"t": T0, "event": "cluster-stopped", "outcome": "requeued"}, "cluster stopped: tasks killed, job requeued"),
        ({"t": T0, "event": "cluster-stopped", "outcome": "NODE_FAIL"},
         "cluster stopped: tasks killed, job ended NODE_FAIL"),
        ({"t": T0, "event": "node-failed", "node": "node2", "outcome": "requeued"},
         "node node2 failed: tasks killed, job requeued"),
        ({"t": T0, "event": "node-failed", "node": "node2", "outcome": "NODE_FAIL"},
         "node node2 failed: tasks killed, job ended NODE_FAIL"),
        ({"t": T0, "event": "infrastructure-failed", "node": "node2", "kind": "leader-killed",
          "reason": "task leader of rank 0 killed before it recorded the task's exit", "outcome": "requeued"},
         "infrastructure failure on node2: task leader of rank 0 killed before it recorded the task's exit; "
         "tasks killed, job requeued"),
        ({"t": T0, "event": "infrastructure-failed", "node": "node2", "kind": "cgroup-removed", "reason": "gone",
          "outcome": "NODE_FAIL"}, "infrastructure failure on node2: gone; tasks killed, job ended NODE_FAIL"),
        ({"t": T0, "event": "infrastructure-failed", "node": "node2", "step": 3, "kind": "agent-error",
          "reason": "the agent's step runner failed: boom"},
         "infrastructure failure on node2 (step 3): the agent's step runner failed: boom"),
        ({"t": T0, "event": "requeued", "run_start": T0 - 100.86, "run_end": T0, "cause": "node failure node2"},
         "requeued (node failure node2) run_start=2023-11-14T22:11:39 run_end=2023-11-14T22:13:20"),
        ({"t": T0, "event": "updated", "begin_time": T0 + 60, "time_limit_s": 600},
         "updated begin_time=2023-11-14T22:14:20 time_limit_s=600"),
        ({"t": T0, "event": "nodes-held", "nodes": ["node1", "node3"], "until": T0 + 300},
         f"nodes node1,node3 held for it (expedited requeue) until {render.format_timestamp(T0 + 300)}"),
        ({"t": T0, "event": "signal", "signal": "USR1"}, "signal USR1 sent"),
        ({"t": T0, "event": "signal", "signal": 10, "reason": "time limit"}, "signal 10 sent (time limit)"),
        ({"t": T0, "event": "signal"}, "signal sent"),
        ({"time": T0, "kind": "resized", "nodes": 2}, "resized nodes=2"),  # unknown events stay readable
        ({"note": "x"}, "event note=x"),
    ],
)
def test_describe_event(event, text):
    assert render.describe_event(event) == text


def test_history_lines_tolerate_a_missing_time():
    assert render.history_lines({"history": [{"event": "requeued"}]}) == ["History:", "  Unknown  requeued"]
    assert render.history_lines({"history": []}) == []
    assert render.history_lines({}) == []


def test_format_fields():
    assert render.format_fields([("A", "1"), ("Long", "x")]) == ["A    : 1", "Long : x"]


def test_queue_rows_read_only_the_queue_fields():
    """`corral queue` asks the controller for QUEUE_FIELDS (or QUEUE_LONG_FIELDS) only: every row is the same
    from records of only those fields, whatever the job's state, array, reason or forecast."""
    from corral.slurm.squeue.select import combine_pending_array_tasks

    forecast = make_job(9, reason="Resources", estimated_start=T0 + 60, estimated_start_source="forecast",
                        estimated_start_window=[T0 + 30, T0 + 3600])
    jobs = [*canned_jobs().values(), forecast,
            make_job(10, state="RUNNING", nodelist="node[1-4]", gpu_idle_flagged=True),
            make_job(11, account="hep", qos="high", queue="q", reason_detail="waits"),
            *[make_job(20 + task, array_job_id=20, array_task_id=task, array_throttle=2) for task in range(3)]]
    for fields, rows in ((render.QUEUE_FIELDS, render.queue_rows), (render.QUEUE_LONG_FIELDS, render.queue_long_rows)):
        narrow = [{name: job[name] for name in fields if name in job} for job in jobs]
        assert rows(combine_pending_array_tasks(narrow), T0) == rows(combine_pending_array_tasks(jobs), T0)
    assert len(render.QUEUE_FIELDS) < len(jobs[0]) / 2


def test_queue_columns_print_what_the_rows_print():
    """`corral queue` builds its table a column at a time from the controller's columns (queue_columns,
    format_columns): the same lines as rows of records give, for jobs of every kind and many alike (whose
    cells are computed once per group), and records (None) only when a job belongs to an array."""
    from corral.slurm.common.table import JobColumns

    forecast = make_job(9, reason="Resources", estimated_start=T0 + 60, estimated_start_source="forecast",
                        estimated_start_window=[T0 + 30, T0 + 3600])
    jobs = [*canned_jobs().values(), forecast,
            make_job(10, state="RUNNING", nodelist="node[1-4]", gpu_idle_flagged=True, elapsed_s=70.0),
            make_job(11, account="hep", qos="high", queue="q", reason_detail="waits"),
            *[make_job(100 + n, name=f"n{n}", user=f"u{n % 3}", reason="Priority") for n in range(200)]]
    for fields, rows, headers, right, long in (
            (render.QUEUE_FIELDS, render.queue_rows, render.QUEUE_HEADERS, render.QUEUE_RIGHT, False),
            (render.QUEUE_LONG_FIELDS, render.queue_long_rows, render.QUEUE_LONG_HEADERS, render.QUEUE_LONG_RIGHT,
             True)):
        for chosen in (jobs, jobs[-200:]):  # every kind; then only jobs alike (grouped)
            table = JobColumns.of_records(fields, chosen)
            columns = render.queue_columns(table, T0, long)
            assert columns is not None
            assert render.format_columns(headers, columns, right) == render.format_table(
                headers, rows(chosen, T0), right)
    tasks = [make_job(20 + task, array_job_id=20, array_task_id=task) for task in range(3)]
    assert render.queue_columns(JobColumns.of_records(render.QUEUE_FIELDS, [*jobs, *tasks]), T0) is None
