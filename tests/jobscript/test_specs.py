import pytest

from corral.jobscript import DirectiveError
from corral.jobscript.specs import (
    DependencyTerm,
    IndexRange,
    JobRef,
    parse_array_spec,
    parse_dependency_spec,
    parse_signal_spec,
)


@pytest.mark.parametrize(
    ("text", "indices", "throttle"),
    [
        ("0-99%8", list(range(100)), 8),
        ("1,3,5", [1, 3, 5], None),
        ("0-15:4", [0, 4, 8, 12], None),
        ("7", [7], None),
        ("1-3,2-4%1", [1, 2, 3, 4], 1),  # overlaps count once
        ("10-11,0", [0, 10, 11], None),
        ("0-0", [0], None),
        ("4000000", [4_000_000], None),
    ],
)
def test_array_spec(text, indices, throttle):
    spec = parse_array_spec(text)
    assert spec.indices() == indices and spec.throttle == throttle


def test_array_ranges_keep_their_shape():
    spec = parse_array_spec("0-15:4,20")
    assert spec.ranges == (IndexRange(0, 15, 4), IndexRange(20, 20))
    assert [r.count for r in spec.ranges] == [4, 1]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty"),
        ("%3", "no indexes before '%'"),
        ("1-3%", "after '%' must be a positive integer, not ''"),
        ("1-3%x", "not 'x'"),
        ("1-3%0", "not '0'"),
        ("3-1", "range '3-1' ends before it starts"),
        ("0-9:0", "step in '0-9:0' must be at least 1"),
        ("a-b", "bad item 'a-b'"),
        ("1-", "bad item '1-'"),
        ("-1", "bad item '-1'"),
        ("1:2", "bad item '1:2'"),
        ("1;2", "bad item '1;2'"),
        ("1-4000001", "index 4000001 is above the largest allowed"),
        ("１", "bad item"),  # a full-width digit is not an index
    ],
)
def test_array_spec_errors(text, problem):
    with pytest.raises(DirectiveError) as info:
        parse_array_spec(text)
    assert problem in info.value.reason
    assert "0-99%8" in info.value.reason  # the forms are spelled out


def test_dependency_all_of():
    spec = parse_dependency_spec("afterok:1:2_3,afterany:4+10,after:5+90:6")
    assert not spec.any_of
    assert spec.terms == (
        DependencyTerm("afterok", (JobRef(1), JobRef(2, 3))),
        DependencyTerm("afterany", (JobRef(4, delay_s=600),)),
        DependencyTerm("after", (JobRef(5, delay_s=5400), JobRef(6))),  # ':' separates ids: +TIME is minutes
    )


def test_dependency_any_of_and_singleton():
    spec = parse_dependency_spec("afternotok:7?singleton")
    assert spec.any_of
    assert spec.terms == (DependencyTerm("afternotok", (JobRef(7),)), DependencyTerm("singleton"))
    assert parse_dependency_spec(" singleton ").terms == (DependencyTerm("singleton"),)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty dependency"),
        ("afterok:1,", "empty dependency"),
        ("afterok", "'afterok' needs at least one job id"),
        ("afterok:", "'afterok' needs at least one job id"),
        ("afterok:1::2", "bad job id ''"),
        ("AfterOK:1", "unknown dependency 'AfterOK'"),
        ("expand:1", "unknown dependency 'expand'"),
        ("afterok:1_", "bad job id '1_'"),
        ("afterok:1_x", "bad job id '1_x'"),
        ("afterok:-1", "bad job id '-1'"),
        ("after:1+", "bad job id '1+'"),
        ("after:1+0", "bad time '+0'"),
        ("afterok:1,afterok:2?afterok:3", "not both"),
        ("singleton:1", "unknown dependency 'singleton'"),
    ],
)
def test_dependency_errors(text, problem):
    with pytest.raises(DirectiveError) as info:
        parse_dependency_spec(text)
    assert problem in info.value.reason
    assert "afternotok" in info.value.reason


@pytest.mark.parametrize(
    ("text", "number", "lead_s", "batch_only", "canonical"),
    [
        ("USR1", 10, 60, False, "USR1@60"),
        ("SIGUSR1", 10, 60, False, "USR1@60"),
        ("sigusr2@90", 12, 90, False, "USR2@90"),
        ("B:TERM@120", 15, 120, True, "B:TERM@120"),
        ("B:SIGINT", 2, 60, True, "B:INT@60"),
        ("10", 10, 60, False, "10@60"),
        ("9@0", 9, 0, False, "9@0"),
        ("HUP@65535", 1, 65535, False, "HUP@65535"),
        ("64", 64, 60, False, "64@60"),
        ("xcpu", 24, 60, False, "XCPU@60"),
    ],
)
def test_signal_spec(text, number, lead_s, batch_only, canonical):
    spec = parse_signal_spec(text)
    assert (spec.number, spec.lead_s, spec.batch_only, spec.text()) == (number, lead_s, batch_only, canonical)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "unknown signal ''"),
        ("FOO", "unknown signal 'FOO'"),
        ("SIG", "unknown signal 'SIG'"),
        ("0", "signal number 0 is not between 1 and 64"),
        ("65", "signal number 65"),
        ("USR1@", "not ''"),
        ("USR1@-5", "not '-5'"),
        ("USR1@65536", "from 0 to 65535"),
        ("USR1@1.5", "whole seconds"),
        ("R:USR1", "unsupported flag 'R'"),
        ("B:R:USR1", "unsupported flag 'B:R'"),
        ("B:", "unknown signal ''"),
    ],
)
def test_signal_errors(text, problem):
    with pytest.raises(DirectiveError) as info:
        parse_signal_spec(text)
    assert problem in info.value.reason
    assert "[B:]SIG[@SECONDS]" in info.value.reason
