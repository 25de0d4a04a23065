import json

import pytest

from .standin import canned_fairshare, canned_priorities, canned_queues, make_job


def table(text):
    return [line.split() for line in text.strip().splitlines()]


def test_requeue(standin, cli):
    result = cli("requeue", "1", "3")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["Requeued job 1 (PENDING)", "Requeued job 3 (PENDING)"]
    assert result.stderr == ""
    assert standin.state.actions == [("requeue", 1), ("requeue", 3)]
    assert standin.state.jobs[3]["restart_count"] == 1


def test_requeue_refusals_are_reported_and_the_rest_done(standin, cli):
    standin.state.jobs[4]["requeue"] = False
    result = cli("requeue", "2", "99", "4", "1")
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "corral: error: job 2: job 2 is pending; only running or finished jobs can be requeued",
        "corral: error: job 99 not found",
        "corral: error: job 4: job 4 was submitted with --no-requeue",
    ]
    assert result.stdout == "Requeued job 1 (PENDING)\n"
    assert [job_id for _, job_id in standin.state.actions] == [2, 4, 1]


def test_hold_and_release(standin, cli):
    result = cli("hold", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Held job 2 (PENDING)\n"
    assert standin.state.jobs[2]["held"] and standin.state.jobs[2]["reason"] == "JobHeldUser"
    result = cli("release", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Released job 2 (PENDING)\n"
    assert not standin.state.jobs[2]["held"]


def test_hold_names_array_tasks(standin, cli):
    standin.state.jobs[30] = make_job(30, array_job_id=29, array_task_id=1)
    assert cli("hold", "30").stdout == "Held job 29_1 (PENDING)\n"


@pytest.mark.parametrize(
    ("command", "job_id", "message"),
    [
        ("hold", "1", "job 1: job 1 is RUNNING; only pending jobs can be held"),
        ("release", "2", "job 2: job 2 is not held"),
        ("release", "42", "job 42 not found"),
    ],
)
def test_hold_release_refusals(standin, cli, command, job_id, message):
    result = cli(command, job_id)
    assert result.exit_code == 1
    assert result.stderr == f"corral: error: {message}\n"
    assert result.stdout == ""


def test_job_actions_need_numeric_ids(standin, cli):
    for command in ("requeue", "hold", "release"):
        assert cli(command, "x").exit_code == 2
        assert cli(command).exit_code == 2  # at least one id


def test_other_errors_stop_at_once(standin, cli, monkeypatch):
    monkeypatch.setenv("CORRAL_SECRET", "wrong")
    result = cli("hold", "1", "2")
    assert result.exit_code == 1
    assert result.stderr.count("corral: error:") == 1 and "refused the request" in result.stderr


def test_prio_table(standin, cli):
    result = cli("prio")
    assert result.exit_code == 0, result.output
    header, *rows = table(result.stdout)
    assert header == ["JOBID", "USER", "ACCOUNT", "PARTITION", "QOS", "PRIORITY", "AGE", "FAIRSHARE", "JOBSIZE",
                      "PARTITION_FACTOR", "QOS_FACTOR", "NICE"]
    assert len(set(header)) == len(header), "each column is named once"
    assert rows == [
        ["2", "bob", "bio", "gpu", "high", "10450", "250", "9000", "100", "0", "1000", "0"],
        ["7", "alice", "hep", "gpu", "normal", "3100", "1000", "2100", "0", "0", "0", "0"],
    ]
    assert standin.state.queries[-1] == ("/priority", {})


def test_share_table(standin, cli):
    result = cli("share")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["ACCOUNT", "PARENT", "SHARES", "NORMSHARES", "RAWUSAGE", "NORMUSAGE", "FAIRSHARE"]
    assert lines[1].split() == ["physics", "-", "3", "0.750000", "7200", "0.900000", "0.250000"]
    assert lines[2].startswith(" hep ")  # a sub-account, indented as sshare does
    assert lines[3].split() == ["bio", "-", "1", "0.250000", "800", "0.100000", "0.812500"]


def test_queues_table(standin, cli):
    result = cli("queues")
    assert result.exit_code == 0, result.output
    header, *rows = table(result.stdout)
    assert header == ["NAME", "COHORT", "NOMINAL", "USAGE", "BORROWING", "PENDING", "RUNNING"]
    assert rows == [
        ["hep-q", "all", "gpu=8,mem=64G", "gpu=12,mem=128G", "yes", "3", "2"],
        ["solo", "-", "-", "-", "no", "0", "0"],
    ]


@pytest.mark.parametrize(
    ("command", "expected"),
    [("prio", canned_priorities), ("share", canned_fairshare), ("queues", canned_queues)],
)
def test_policy_views_json(standin, cli, command, expected):
    result = cli(command, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected()


def test_empty_views_print_just_the_header(standin, cli, monkeypatch):
    monkeypatch.setattr("corral.cli.client.Client.priority", lambda self: [])
    result = cli("prio")
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) == 1
