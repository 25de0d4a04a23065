"""Job ids on the command line against the real controller (tests/controller/live.py): Slurm's forms
name the jobs Slurm would, and nothing else is read as an id. int("1_5") is 15 in Python, so a CLI that
parsed ids with int() once cancelled job 15 for `corral cancel 1_5`."""
import json

import pytest

BAD_IDS = ["1_5_3", "15__2", "+3", " 3", "3 ", "0x10", "1e3", "\u0663", "-1", "", "0", "1.5", "1_",
           "9223372036854775808", "99999999999999999999999"]


@pytest.fixture
def jobs(live):
    """Array 1 (tasks 0-9: ids 1-10), then plain jobs 11 to 15."""
    assert live.submit(array="0-9")["task_ids"] == list(range(1, 11))
    assert [live.submit()["job_id"] for _ in range(5)] == [11, 12, 13, 14, 15]
    return live


def cancelled(live) -> list[int]:
    return sorted(i for i, state in live.states().items() if state == "CANCELLED")


def fields_of(text):
    return [{k.strip(): v for k, v in (line.split(" : ", 1) for line in block.splitlines())}
            for block in text.strip().split("\n\n")]


def test_cancel_an_array_task_never_touches_the_job_its_digits_spell(jobs, cli):
    result = cli("cancel", "1_5")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Cancelled job 1_5 (CANCELLED)\n"
    assert cancelled(jobs) == [6]  # task 5 of array 1 has its own id, 6; job 15 is untouched
    assert jobs.job(15)["state"] == "PENDING"


def test_cancel_an_array_id_cancels_every_task(jobs, cli):
    result = cli("cancel", "1")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [f"Cancelled job 1_{i} (CANCELLED)" for i in range(10)]
    assert cancelled(jobs) == list(range(1, 11))


def test_cancel_a_list_of_tasks(jobs, cli):
    result = cli("cancel", "1_[2-3,7]", "12")
    assert result.exit_code == 0, result.output
    assert cancelled(jobs) == [3, 4, 8, 12]


def test_cancel_a_task_id_of_its_own_is_that_task_only(jobs, cli):
    assert cli("cancel", "3").exit_code == 0
    assert cancelled(jobs) == [3]


def test_cancel_an_array_with_finished_tasks_cancels_the_rest(jobs, cli):
    assert cli("cancel", "1_0").exit_code == 0
    result = cli("cancel", "1")
    assert result.exit_code == 0, result.output
    assert len(result.stdout.splitlines()) == 9
    assert "1 of the 10 jobs of 1 had already ended" in result.stderr


def test_a_task_of_a_job_that_is_no_array_names_nothing(jobs, cli):
    result = cli("cancel", "12_0", "3_1")  # 3 is a task's own id, not an array's
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["corral: error: job 12_0 not found", "corral: error: job 3_1 not found"]
    assert cancelled(jobs) == []


def test_show_an_array_task(jobs, cli):
    result = cli("show", "1_0")
    assert result.exit_code == 0, result.output
    [fields] = fields_of(result.stdout)
    assert (fields["JobId"], fields["ArrayJobId"], fields["ArrayTaskId"]) == ("1", "1", "0")
    assert json.loads(cli("show", "1_9", "--json").stdout)["id"] == 10


def test_show_an_array_id_shows_every_task_as_scontrol(jobs, cli):
    result = cli("show", "1")
    assert result.exit_code == 0, result.output
    assert [f["ArrayTaskId"] for f in fields_of(result.stdout)] == [str(i) for i in range(10)]
    assert [j["id"] for j in json.loads(cli("show", "1", "--json").stdout)] == list(range(1, 11))
    assert json.loads(cli("show", "15", "--json").stdout)["id"] == 15  # one job: one object


def test_hold_and_release_take_the_same_forms(jobs, cli):
    result = cli("hold", "1_5", "1_[0-1]")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["Held job 1_5 (PENDING)", "Held job 1_0 (PENDING)", "Held job 1_1 (PENDING)"]
    assert [i for i in range(1, 16) if jobs.job(i)["held"]] == [1, 2, 6]
    assert cli("release", "1").exit_code == 0  # tasks not held refuse; the held ones are released
    assert not any(jobs.job(i)["held"] for i in range(1, 16))


def test_acct_jobs_take_the_same_forms(jobs, cli):
    result = cli("acct", "-j", "1_5,1_[8-9],15", "--json")
    assert result.exit_code == 0, result.output
    assert [j["id"] for j in json.loads(result.stdout)] == [6, 9, 10, 15]


def error_text(result) -> str:
    """The usage error as one line, without the frame rich draws around it."""
    return " ".join(result.stderr.replace("│", " ").split())


def test_bad_ids_are_usage_errors_that_touch_nothing(jobs, cli):
    before = jobs.states()
    for command in ("cancel", "show", "hold", "release", "requeue"):
        for bad in BAD_IDS:
            args = [command, bad] if command == "show" else [command, "11", bad]  # 11 is valid: untouched too
            result = cli(*args)
            assert result.exit_code == 2, (command, bad, result.output)
            expected = "No such option: -1" if bad == "-1" else f"invalid job id {bad!r}"
            assert expected in error_text(result), (command, bad, result.stderr)
    assert jobs.states() == before
    assert not any(jobs.job(i)["held"] for i in before)


def test_acct_bad_ids_fail_before_asking(jobs, cli):
    for bad in BAD_IDS:
        result = cli("acct", "-j", f"11,{bad}")
        if not bad:  # an empty item vanishes, as in sacct's lists
            assert result.exit_code == 0, result.output
            continue
        assert result.exit_code == 1, (bad, result.output)
        assert result.stderr.startswith(f"corral: error: invalid job id {bad!r}: "), result.stderr
        assert result.stderr.endswith(" in --jobs\n")
