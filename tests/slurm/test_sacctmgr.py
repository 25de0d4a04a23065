"""sacctmgr's show tables against real Slurm 22.05's output (golden_reports/README.md says how it was
recorded), from a tenancy document equivalent to the anchor's associations."""
from __future__ import annotations

from pathlib import Path

import pytest

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.sacctmgr.opts import parse_sacctmgr
from corral.slurm.sacctmgr.output import sacctmgr_output

GOLDEN = Path(__file__).resolve().parent / "golden_reports"
QOS_NORMAL = {"name": "normal", "priority": 0, "preempts": [], "preempt_mode": "requeue", "grace_s": 0.0,
              "min_runtime_s": 0.0, "max_wall_s": None}
TENANCY = {"accounts": [{"name": "lab", "parent": None, "shares": 1}, {"name": "ml", "parent": None, "shares": 2}],
           "users": [{"name": "root", "accounts": ["lab", "ml"], "default_account": "lab"}],
           "qos": [QOS_NORMAL], "default_qos": "normal", "limits": []}


def render(*argv: str, tenancy: dict = TENANCY) -> str:
    out, err, code = sacctmgr_output(parse_sacctmgr(list(argv)), tenancy, "anchor")
    assert (err, code) == ("", 0)
    return out


@pytest.mark.parametrize(("argv", "name"), [
    (["show", "assoc"], "sacctmgr_assoc"), (["-P", "show", "assoc"], "sacctmgr_assoc_parsable"),
    (["show", "assoc", "format=account,user,share,qos"], "sacctmgr_assoc_format"),
    (["show", "account"], "sacctmgr_account"), (["list", "users"], "sacctmgr_user"),
])
def test_matches_slurm_byte_for_byte(argv, name):
    assert render(*argv) == (GOLDEN / f"{name}.txt").read_text()


def test_qos_matches_slurm_but_for_corrals_explicit_preempt_mode():
    # Slurm's `cluster` is "the cluster's PreemptMode"; a corral QOS always names its own.
    for argv, name in ((["show", "qos"], "sacctmgr_qos"), (["-n", "show", "qos"], "sacctmgr_qos_noheader"),
                       (["-P", "show", "qos", "format=name,priority,preempt,preemptmode"],
                        "sacctmgr_qos_format_parsable")):
        assert render(*argv) == (GOLDEN / f"{name}.txt").read_text().replace("cluster", "requeue")


def test_limits_times_and_tree():
    tenancy = {**TENANCY, "qos": [QOS_NORMAL, {**QOS_NORMAL, "name": "high", "priority": 100, "preempts": ["normal"],
                                               "grace_s": 90.0, "min_runtime_s": 600.0, "max_wall_s": 93600.0}],
               "limits": [{"account": "ml", "max_running_jobs": 4, "max_gpus": 8},
                          {"user": "root", "max_submit_jobs": 10, "max_gpus": 2}]}
    assoc = render("-P", "show", "assoc", "format=acc,user,grpjobs,grptres,maxsubmit,qos", tenancy=tenancy)
    assert assoc.splitlines() == ["Account|User|GrpJobs|GrpTRES|MaxSubmit|QOS", "root|||||high,normal",
                                  "lab|||||high,normal", "lab|root||gres/gpu=2|10|high,normal",
                                  "ml||4|gres/gpu=8||high,normal", "ml|root||gres/gpu=2|10|high,normal"]
    qos = render("-P", "-n", "show", "qos", "names=high", "format=name,gracetime,preemptexempttime,maxwall,preempt",
                 tenancy=tenancy)
    assert qos == "high|00:01:30|00:10:00|1-02:00:00|normal\n"
    tree = render("show", "assoc", "tree", "format=account%-12,user", tenancy=tenancy).splitlines()
    assert tree[2:4] == ["root                    ", " lab                    "]
    assert render("-P", "-n", "show", "assoc", "where", "users=root", "accounts=ml", "format=acc,user") == "ml|root\n"


@pytest.mark.parametrize(("argv", "message"), [
    (["add", "account", "foo"], "corral tenancy apply"), (["modify", "user", "root", "set", "maxjobs=3"], "only reads"),
    (["show", "foo"], "No valid entity"), (["show", "assoc", "format=bogus"], "Unknown field 'bogus'"),
    (["show", "qos", "users=x"], "Unknown condition: users=x"), ([], "name a command"),
])
def test_writes_and_bad_input_are_clear_errors(argv, message):
    with pytest.raises(SlurmCommandError, match=message) as error:
        sacctmgr_output(parse_sacctmgr(argv), TENANCY, "anchor")
    assert error.value.exit_code == 1
