"""GNU getopt_long behaviour, with glibc's messages (corral.slurm.common.getopt)."""
from __future__ import annotations

import pytest

from corral.slurm.common.getopt import NO_ARG, OPTIONAL, REQUIRED, GetoptError, Opt, getopt_long

TABLE = (
    Opt("jobs", "j", OPTIONAL), Opt("noheader", "h"), Opt("format", "o", REQUIRED), Opt("long", "l"),
    Opt("cluster", "M", REQUIRED, aliases=("clusters",)), Opt("sort", "S", REQUIRED), Opt("start"),
    Opt("states", "t", REQUIRED), Opt("signal", "s", REQUIRED), Opt("accounts", "U", REQUIRED, long=False),
)


def parse(*argv, permute=True):
    line = getopt_long(list(argv), TABLE, "prog", permute=permute)
    return list(line.options), list(line.positionals)


@pytest.mark.parametrize(("argv", "options", "positionals"), [
    (["-j1008"], [("jobs", "1008")], []),  # optional value: attached only
    (["-j", "1008"], [("jobs", None)], ["1008"]),
    (["--jobs=5,6"], [("jobs", "5,6")], []),
    (["--jobs", "5"], [("jobs", None)], ["5"]),
    (["--job=5"], [("jobs", "5")], []),  # parsl's abbreviation
    (["-o", "%i"], [("format", "%i")], []),
    (["-o%i"], [("format", "%i")], []),
    (["--format", "%i"], [("format", "%i")], []),
    (["--form=%i"], [("format", "%i")], []),
    (["-hl"], [("noheader", None), ("long", None)], []),  # clustered flags
    (["-ho", "%i"], [("noheader", None), ("format", "%i")], []),
    (["-ho%i"], [("noheader", None), ("format", "%i")], []),
    (["12", "--signal", "USR2"], [("signal", "USR2")], ["12"]),  # options after positionals
    (["a", "--", "-h", "b"], [], ["a", "-h", "b"]),
    (["-"], [], ["-"]),
    (["--clus=all"], [("cluster", "all")], []),  # two spellings of one option are not ambiguous
    (["--clusters", "x"], [("cluster", "x")], []),
    (["--start"], [("start", None)], []),  # an exact match wins over longer names
    (["-U", "acct"], [("accounts", "acct")], []),
    (["-o", "-h"], [("format", "-h")], []),  # a required value is the next token, whatever it is
])
def test_gnu_semantics(argv, options, positionals):
    assert parse(*argv) == (options, positionals)


def test_plus_mode_stops_at_the_first_positional():
    assert parse("-h", "script.sh", "-l", "arg", permute=False) == ([("noheader", None)], ["script.sh", "-l", "arg"])


@pytest.mark.parametrize(("argv", "message"), [
    (["--bogus"], "prog: unrecognized option '--bogus'"),
    (["--bogus=1"], "prog: unrecognized option '--bogus=1'"),
    (["-Y"], "prog: invalid option -- 'Y'"),
    (["-hY"], "prog: invalid option -- 'Y'"),
    (["-o"], "prog: option requires an argument -- 'o'"),
    (["--form"], "prog: option '--format' requires an argument"),
    (["--long=1"], "prog: option '--long' doesn't allow an argument"),
    (["--s"], "prog: option '--s' is ambiguous; possibilities: '--sort' '--start' '--states' '--signal'"),
    (["--st=1"], "prog: option '--st=1' is ambiguous; possibilities: '--start' '--states'"),
])
def test_glibc_messages(argv, message):
    with pytest.raises(GetoptError) as caught:
        parse(*argv)
    assert str(caught.value) == message


def test_command_line_accessors():
    line = getopt_long(["-j1", "--jobs=2", "-h", "-h"], TABLE, "prog")
    assert line.values("jobs") == ["1", "2"]
    assert line.last("jobs") == "2"
    assert line.count("noheader") == 2
    assert line.has("noheader") and not line.has("long")
    assert line.last("format", "default") == "default"


def test_argument_kinds_are_distinct():
    assert len({NO_ARG, REQUIRED, OPTIONAL}) == 3
