"""`scontrol show reservation [NAME]` from corral's reservations (GET /reservations), in Slurm 22.05's
layout (api/reservation_info.c: slurm_sprint_reservation_info; scontrol/info_res.c: scontrol_print_res).

What corral has no notion of prints as Slurm prints it unset: Features, PartitionName, Groups, Licenses,
BurstBuffer and MaxStartDelay `(null)`, Watts `n/a`. Flags are the two corral's reservations can carry:
MAINT (a maintenance window) and SPEC_NODES (the nodes were named, not picked for a GPU count). CoreCnt
and TRES count the reserved nodes' CPUs (corral's CPUs are Slurm's cores); TRES names GPUs only for a
reservation of a GPU count, as Slurm's for `TRES=gres/gpu=N` (a reservation of whole nodes shows cpu=)."""
from __future__ import annotations

from _collections_abc import Mapping, Sequence

from corral import hostlist
from corral.slurm.common import timefmt, tres

Result = tuple[str, str, int]
NO_RESERVATIONS = "No reservations in the system\n"


def reservation_lines(reservation: Mapping, nodes: Sequence[Mapping], now: float,
                      time_format: str | None = None) -> list[str]:
    start, end = float(reservation["start"]), float(reservation["end"])
    names = list(reservation.get("node_names") or ())
    chosen = set(names)
    cpus = sum(int(n.get("cpus", 0)) for n in nodes if n["name"] in chosen)
    gpus = reservation.get("gpus")
    totals = {"cpu": str(cpus), **({"gres/gpu": str(gpus)} if gpus else {})}
    flags = [flag for flag, has in (("MAINT", reservation.get("maintenance")),
                                    ("SPEC_NODES", reservation.get("nodes") is not None)) if has]
    duration = timefmt.elapsed(end - start) if end >= start else "N/A"
    return [
        f"ReservationName={reservation['name']} StartTime={timefmt.make_time_str(start, now, time_format)} "
        f"EndTime={timefmt.make_time_str(end, now, time_format)} Duration={duration}",
        f"Nodes={hostlist.compress(names) if names else '(null)'} NodeCnt={len(names)} CoreCnt={cpus} "
        f"Features=(null) PartitionName=(null) Flags={','.join(flags)}",
        f"TRES={tres.scontrol_text(totals)}",
        f"Users={_names(reservation.get('users'))} Groups=(null) Accounts={_names(reservation.get('accounts'))} "
        f"Licenses=(null) State={'ACTIVE' if start <= now <= end else 'INACTIVE'} BurstBuffer=(null) Watts=n/a",
        "MaxStartDelay=(null)",
    ]


def show_reservations(reservations: Sequence[Mapping], nodes: Sequence[Mapping], names: Sequence[str], now: float,
                      *, one_liner: bool = False, time_format: str | None = None) -> Result:
    """scontrol_print_res: every reservation, or the one named; its messages go to stdout, as Slurm's."""
    chosen = [r for r in reservations if not names or r["name"] == names[0]][:1 if names else None]
    if not chosen:
        if names:
            return f"Reservation {names[0]} not found\n", "", 1
        return NO_RESERVATIONS, "", 0
    blocks = []
    for reservation in chosen:  # in the controller's order, as slurmctld lists its own
        lines = reservation_lines(reservation, nodes, now, time_format)
        blocks.append(" ".join(lines) + "\n" if one_liner else "\n   ".join(lines) + "\n\n")
    return "".join(blocks), "", 0


def _names(items: Sequence[str] | None) -> str:
    return ",".join(items) if items else "(null)"
