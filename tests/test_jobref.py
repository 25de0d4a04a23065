"""corral.jobref: Slurm's job id forms, and nothing Python's int() would also read."""
from __future__ import annotations

import pytest

from corral.jobref import ALL_TASKS, MAX_ID, JobIdError, JobRef, ascii_number, parse_job_list, parse_job_ref

ALL = {"task_lists": True, "all_tasks": True, "steps": True}


@pytest.mark.parametrize(("text", "job_id", "tasks", "step"), [
    ("7", 7, None, None), ("007", 7, None, None), ("7_3", 7, ((3, 3),), None),
    ("7_[1-3,5]", 7, ((1, 3), (5, 5)), None), ("7_*", 7, ALL_TASKS, None), ("7.0", 7, None, "0"),
    ("7.batch", 7, None, "batch"), ("7_2.extern", 7, ((2, 2),), "extern"), (str(MAX_ID), MAX_ID, None, None),
])
def test_forms(text, job_id, tasks, step):
    assert parse_job_ref(text, **ALL) == JobRef(text, job_id, tasks, step)


@pytest.mark.parametrize("text", [
    "", "1_5_3", "15__2", "+3", " 3", "3 ", "3\n", "0x10", "1e3", "\u0663", "\u00b2", "-1", "0", "1_", "_1",
    "1.", "1.x", "1.0.1", "1_[", "1_[]", "1_[1-]", "1_[-1]", "1_[3-1]", "1_[1-3].0", "1_[1;2]", "1+0", "1,2",
    str(MAX_ID + 1), "9" * 5000, "1_" + str(MAX_ID + 1), "1." + str(MAX_ID + 1),
])
def test_everything_else_is_refused_naming_the_text(text):
    with pytest.raises(JobIdError) as caught:
        parse_job_ref(text, **ALL)
    assert str(caught.value).startswith(f"invalid job id {text!r}: ")


@pytest.mark.parametrize(("text", "forms", "why"), [
    ("7_3", {"tasks": False}, "an array task is not accepted here; expected N (ASCII digits only)"),
    ("7_[1-2]", {}, "a list of tasks is not accepted here; expected N or N_I (ASCII digits only)"),
    ("7_*", {"task_lists": True}, "`_*` is not accepted here; expected N, N_I or N_[I-J,K] (ASCII digits only)"),
    ("7.0", {}, "a step is not accepted here; expected N or N_I (ASCII digits only)"),
    ("0", {}, "job ids start at 1"),
    (str(MAX_ID + 1), {}, f"job ids go up to {MAX_ID}"),
])
def test_forms_are_accepted_only_where_they_apply(text, forms, why):
    with pytest.raises(JobIdError) as caught:
        parse_job_ref(text, **forms)
    assert str(caught.value) == f"invalid job id {text!r}: {why}"


def test_lists_split_outside_brackets_and_drop_empty_items():
    assert [r.text for r in parse_job_list("1,2_[3,5],,4", task_lists=True)] == ["1", "2_[3,5]", "4"]


def test_task_ranges_are_not_expanded():
    ref = parse_job_ref(f"1_[0-{MAX_ID}]", task_lists=True)
    assert ref.has_task(10**18) and not ref.has_task(None)


@pytest.mark.parametrize(("text", "value"), [("12", 12), ("0", 0), ("1_2", None), ("\u0661", None), ("", None),
                                             (" 1", None), (str(MAX_ID + 1), None)])
def test_ascii_number(text, value):
    assert ascii_number(text) == value
