"""Advance reservations held by the engine: created, listed, expired, and handed to the core."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from corral import hostlist
from corral.api.tenancy import ReservationSpec
from corral.core.model import AdvanceReservation
from corral.engine.records import Node


class ReservationError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Reservation:
    spec: ReservationSpec
    nodes: frozenset[str]

    def core(self) -> AdvanceReservation:
        s = self.spec
        return AdvanceReservation(s.name, s.start, s.end, self.nodes, s.maintenance)

    def allows(self, user: str, account: str) -> bool:
        if self.spec.maintenance:
            return False
        if not self.spec.users and not self.spec.accounts:
            return True
        return user in self.spec.users or account in self.spec.accounts

    def to_json(self) -> dict[str, Any]:
        return {"spec": self.spec.model_dump(), "nodes": sorted(self.nodes)}


class Reservations:
    def __init__(self, stored: list[dict[str, Any]]) -> None:
        self.by_name: dict[str, Reservation] = {}
        for item in stored:
            spec = ReservationSpec(**item["spec"])
            self.by_name[spec.name] = Reservation(spec, frozenset(item["nodes"]))

    def add(self, spec: ReservationSpec, nodes: Iterable[Node], now: float) -> Reservation:
        if spec.name in self.by_name:
            raise ReservationError(f"reservation {spec.name!r} already exists")
        if spec.end <= now:
            raise ReservationError(f"reservation {spec.name!r} ends in the past")
        known = {n.name: n for n in nodes}
        if spec.nodes is not None:
            try:
                names = hostlist.expand(spec.nodes)
            except hostlist.HostlistError as exc:
                raise ReservationError(str(exc)) from None
            unknown = [n for n in names if n not in known]
            if unknown:
                more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
                raise ReservationError(f"unknown node(s) {', '.join(unknown[:10])}{more}")
        else:
            assert spec.gpus is not None  # ReservationSpec holds nodes or gpus
            names = _nodes_for_gpus(spec.gpus, list(known.values()))
        for other in self.by_name.values():
            overlap = other.nodes & set(names)
            if overlap and other.spec.start < spec.end and spec.start < other.spec.end:
                raise ReservationError(
                    f"overlaps reservation {other.spec.name!r} on {hostlist.compress(sorted(overlap))}")
        record = Reservation(spec, frozenset(names))
        self.by_name[spec.name] = record
        return record

    def remove(self, name: str) -> None:
        if name not in self.by_name:
            raise KeyError(name)
        del self.by_name[name]

    def expire(self, now: float) -> bool:
        gone = [name for name, r in self.by_name.items() if r.spec.end <= now]
        for name in gone:
            del self.by_name[name]
        return bool(gone)

    def boundaries(self) -> list[float]:
        """Times at which scheduling must look again (a reservation opening or closing)."""
        return [t for r in self.by_name.values() for t in (r.spec.start, r.spec.end)]

    def core(self) -> tuple[AdvanceReservation, ...]:
        return tuple(r.core() for r in self.by_name.values())

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.by_name.values()]


def _nodes_for_gpus(gpus: int, nodes: list[Node]) -> list[str]:
    """Fewest nodes, largest first, that hold `gpus` GPUs."""
    chosen, total = [], 0
    for node in sorted(nodes, key=lambda n: (-len(n.gpus), hostlist.sort_key(n.name))):
        if total >= gpus:
            break
        if node.gpus:
            chosen.append(node.name)
            total += len(node.gpus)
    if total < gpus:
        raise ReservationError(f"the cluster has {total} GPUs, fewer than the {gpus} asked for")
    return chosen
