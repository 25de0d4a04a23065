"""`scontrol show reservation` in Slurm 22.05's layout (api/reservation_info.c, scontrol/info_res.c)."""
from __future__ import annotations

import pytest

from corral.slurm.scontrol.opts import parse_scontrol
from corral.slurm.scontrol.output import scontrol_show_output

from .builders import T0, node

NODES = [node("n1"), node("n2"), node("n3")]
MAINT = {"name": "maint", "start": T0 + 3600, "end": T0 + 3600 + 90_000, "nodes": "n[1-2]", "gpus": None,
         "users": [], "accounts": [], "maintenance": True, "node_names": ["n1", "n2"], "active": False}
TEAM = {"name": "team", "start": T0 - 60, "end": T0 + 1800, "nodes": None, "gpus": 4, "users": ["ada", "bob"],
        "accounts": ["physics"], "maintenance": False, "node_names": ["n3"], "active": True}


def show(argv, **kwargs):
    return scontrol_show_output(parse_scontrol(argv), now=T0, nodes=NODES, **kwargs)


def test_every_reservation_as_slurm_prints_it():
    out, err, code = show(["show", "reservation"], reservations=[MAINT, TEAM])
    assert (err, code) == ("", 0)
    assert out == (
        "ReservationName=maint StartTime=2027-01-15T09:00:00 EndTime=2027-01-16T10:00:00 Duration=1-01:00:00\n"
        "   Nodes=n[1-2] NodeCnt=2 CoreCnt=32 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES\n"
        "   TRES=cpu=32\n"
        "   Users=(null) Groups=(null) Accounts=(null) Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a\n"
        "   MaxStartDelay=(null)\n"
        "\n"
        "ReservationName=team StartTime=2027-01-15T07:59:00 EndTime=2027-01-15T08:30:00 Duration=00:31:00\n"
        "   Nodes=n3 NodeCnt=1 CoreCnt=16 Features=(null) PartitionName=(null) Flags=\n"
        "   TRES=cpu=16,gres/gpu=4\n"
        "   Users=ada,bob Groups=(null) Accounts=physics Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a\n"
        "   MaxStartDelay=(null)\n"
        "\n")


@pytest.mark.parametrize("entity", ["reservation", "reservations", "ReservationName", "res", "r"])
def test_the_entity_takes_slurms_names_and_prefixes(entity):
    out, _, code = show(["show", entity, "team"], reservations=[MAINT, TEAM])
    assert code == 0 and out.startswith("ReservationName=team ") and "maint" not in out


def test_one_liner_and_the_messages_slurm_prints_on_stdout():
    out, _, _ = show(["-o", "show", "reservation", "maint"], reservations=[MAINT, TEAM])
    assert out.startswith("ReservationName=maint StartTime=") and out.endswith(" MaxStartDelay=(null)\n")
    assert out.count("\n") == 1
    assert show(["show", "reservation"], reservations=[]) == ("No reservations in the system\n", "", 0)
    assert show(["show", "reservation", "gone"], reservations=[MAINT]) == ("Reservation gone not found\n", "", 1)
