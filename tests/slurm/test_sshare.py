"""sshare against real Slurm 22.05's output (golden_reports/README.md says how it was recorded)."""
from __future__ import annotations

from pathlib import Path

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sshare.opts import parse_sshare
from corral.slurm.sshare.output import sshare_output

GOLDEN = Path(__file__).resolve().parent / "golden_reports"
# The anchor's tree as corral's controller reports it: accounts lab (1 share) and ml (2), no usage;
# root is a member of both.
FAIRSHARE = [
    {"account": "lab", "parent": None, "shares": 1, "norm_shares": 1 / 3, "raw_usage": 0.0, "norm_usage": 0.0,
     "fairshare": 1.0},
    {"account": "ml", "parent": None, "shares": 2, "norm_shares": 2 / 3, "raw_usage": 0.0, "norm_usage": 0.0,
     "fairshare": 1.0},
]
USERS = [{"name": "root", "accounts": ["lab", "ml"]}, {"name": "alice", "accounts": ["ml"]}]
IDLE = "cpu=0,mem=0,energy=0,node=0,billing=0,fs/disk=0,vmem=0,pages=0,gres/gpu=0"


def render(*argv: str) -> str:
    out, err, code = sshare_output(parse_sshare(list(argv)), FAIRSHARE, USERS, "root", "anchor")
    assert (err, code) == ("", 0)
    return out


def golden(name: str) -> str:
    return (GOLDEN / f"{name}.txt").read_text()


@pytest.mark.parametrize(("argv", "name"), [
    (["-u", "root"], "sshare_all"), (["-o", "Account,User,FairShare"], "sshare_format"),
    (["-n", "-A", "ml"], "sshare_account_noheader"),
])
def test_layout_matches_slurm_where_user_rows_have_no_usage_column(argv, name):
    # A user's usage is its account's in corral: its rows leave RawUsage and EffectvUsage empty.
    expected = golden(name).splitlines()
    if name != "sshare_format":
        for i, text in enumerate(expected):
            # A user row: its User cell (after Account's 20 and a space) is not empty.
            if not text.startswith(("Account", "---")) and text[21:31].strip():
                expected[i] = text[:55] + " " * 11 + text[66:67] + " " * 13 + text[80:]
    assert render(*argv).splitlines() == expected


def test_account_rows_and_header_match_slurm_long_parsable():
    ours = render("-u", "root", "-l", "-P").splitlines()
    slurm = golden("sshare_all_long_parsable").splitlines()
    assert ours[0] == slurm[0]
    for mine, theirs in zip(ours[1:], slurm[1:], strict=True):
        mine_cells, their_cells = mine.split("|"), theirs.split("|")
        # NormUsage (5): Slurm leaves it empty on some rows; usage columns on user rows (see above);
        # GrpTRESMins (8): corral has no TRES-minute limits.
        keep = [0, 1, 2, 3, 7, 9] if mine_cells[1] else [0, 1, 2, 3, 4, 6, 7, 9]
        assert [mine_cells[i] for i in keep] == [their_cells[i] for i in keep]


def test_default_shows_only_the_callers_user_rows_and_all_shows_everyone():
    assert "alice" not in render()
    assert render("-a").count("alice") == 1
    assert "alice" in render("-u", "alice") and " root " not in render("-u", "alice").split("\n", 2)[2]
    users_only = render("-a", "-U", "-P").splitlines()[1:]
    assert all(row.split("|")[1] for row in users_only) and len(users_only) == 3


def test_parsable_with_ending_and_long_header():
    assert render("-p").splitlines()[0] == "Account|User|RawShares|NormShares|RawUsage|EffectvUsage|FairShare|"
    assert render("-l").splitlines()[0] == golden("sshare_all_long").splitlines()[0]


def test_usage_and_factor_come_from_the_controllers_view():
    used = [dict(FAIRSHARE[0], raw_usage=7200.9, norm_usage=0.75, fairshare=0.2), FAIRSHARE[1]]
    out, _, _ = sshare_output(parse_sshare(["-P", "-l"]), used, USERS, "root", "anchor")
    assert f" lab||1|0.333333|7200|0.750000|0.750000|0.200000||{IDLE}" in out.splitlines()
    assert out.splitlines()[1].startswith("root|||1.000000|7200|")


def test_run_minutes_are_the_running_jobs_minutes_left_up_the_tree():
    running = [{"user": "root", "account": "ml", "state": "RUNNING", "time_limit_s": 3600, "elapsed_s": 600.0,
                "slices": [{"cpus": 2, "mem_mib": 1000, "gpus": [0]}]}]
    out, _, _ = sshare_output(parse_sshare(["-a", "-n", "-l"]), FAIRSHARE, USERS, "root", "anchor", running)
    rows = {tuple(line[:32].split()): line[-31:-1] for line in out.splitlines()}
    assert rows[("root",)] == rows[("ml",)] == rows[("ml", "root")] == "cpu=100,mem=50000,energy=0,no+"
    assert rows[("lab",)] == rows[("ml", "alice")] == IDLE[:29] + "+"
    parsable, _, _ = sshare_output(parse_sshare(["-P", "-n", "-o", "acc,TRESRun"]), FAIRSHARE, USERS, "root",
                                   "anchor", running)
    assert parsable.splitlines()[3] == (" ml|cpu=100,mem=50000,energy=0,node=50,billing=100,fs/disk=0,vmem=0,"
                                        "pages=0,gres/gpu=50")


def test_format_width_and_an_unknown_field():
    assert render("-o", "acc%8,fair").splitlines()[2] == "    root   0.500000 "  # a width given is right-justified
    with pytest.raises(SlurmCommandError) as error:
        render("-o", "Account,Bogus")
    assert error.value.stderr == 'sshare: error: Invalid field requested: "Bogus"\n'
