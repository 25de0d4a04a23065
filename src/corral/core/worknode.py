"""One node's working state in a cycle (`WorkNode`), what a gang needs on each node (`Need`), and the choice
of whole devices on a node (`choose_devices`, topology-aware).

Fractional GPUs: a request may ask for a share of one GPU per node (`Need.gpu_milli` < 1000). A shared
device leaves `free` (whole-GPU requests never see it) and its milli-GPU in use are kept in
`WorkNode.shared` until its last sharer leaves. The backfill timeline counts only whole devices: a shared
device is not expected back (conservative).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from corral.core.model import GPU_MILLI, Gpu


@dataclass(slots=True)
class Need:
    """What a gang needs on each of its nodes, and for how long."""

    gpus: int
    cpus: int
    mem_mib: int
    gpu_milli: int = GPU_MILLI  # < 1000: a share of one device (gpus == 1)

    def capacity_covers(self, other: Need) -> bool:
        """Does this need (a whole node's) hold `other` on the same node?"""
        return self.gpus >= other.gpus and self.cpus >= other.cpus and self.mem_mib >= other.mem_mib


@dataclass(slots=True)
class WorkNode:
    index: int
    name: str
    gpus: tuple[Gpu, ...]
    cpus: int
    mem_mib: int
    free: set[int]
    free_cpus: int
    free_mem_mib: int
    partitions: frozenset[str]
    gpu_model: str = ""
    # Resources coming back later: (time, gpus, cpus, mem_mib, job id), from running jobs and jobs
    # started this cycle. Times are never earlier than now + a small epsilon (see NodePool.release_time).
    releases: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    # Reservations held for blocked jobs: (start, end, gpus, cpus, mem_mib).
    blocks: list[tuple[float, float, int, int, int]] = field(default_factory=list)
    # Advance reservations covering the whole node: (start, end, name, maintenance).
    advance: list[tuple[float, float, str, bool]] = field(default_factory=list)
    # Devices shared by fractional jobs: index -> milli-GPU in use (1..1000); never also in `free`.
    shared: dict[int, int] = field(default_factory=dict)
    schedulable: bool = True

    def capacity_fits(self, need: Need) -> bool:
        return len(self.gpus) >= need.gpus and self.cpus >= need.cpus and self.mem_mib >= need.mem_mib

    def fits_now(self, need: Need) -> bool:
        if need.gpu_milli < GPU_MILLI:
            return (bool(self.free) or self.share_room(need.gpu_milli) is not None) and \
                self.free_cpus >= need.cpus and self.free_mem_mib >= need.mem_mib
        return self.fits_whole_free(need)

    def fits_whole_free(self, need: Need) -> bool:
        """Does `need` fit now on whole free devices (how the backfill timeline counts)?"""
        return len(self.free) >= need.gpus and self.free_cpus >= need.cpus and self.free_mem_mib >= need.mem_mib

    def share_room(self, milli: int) -> int | None:
        """The least room (free milli) among shared devices that can take `milli` more; None if none."""
        best = None
        for used in self.shared.values():
            room = GPU_MILLI - used
            if room >= milli and (best is None or room < best):
                best = room
        return best

    def free_milli(self) -> tuple[int, ...]:
        """Free milli-GPU per device, high to low (the fragmentation state)."""
        shared = sorted((GPU_MILLI - u for u in self.shared.values()), reverse=True)
        idle = len(self.gpus) - len(self.free) - len(shared)
        return (GPU_MILLI,) * len(self.free) + tuple(shared) + (0,) * idle

    def available_at(self, when: float) -> tuple[int, int, int]:
        """Free (gpus, cpus, mem) at `when`, counting releases due by then and reservations active then."""
        g, c, m = len(self.free), self.free_cpus, self.free_mem_mib
        for t, rg, rc, rm, _ in self.releases:
            if t <= when:
                g, c, m = g + rg, c + rc, m + rm
        for start, end, bg, bc, bm in self.blocks:
            if start <= when < end:
                g, c, m = g - bg, c - bc, m - bm
        return g, c, m

    def usable(self, start: float, end: float, reservation: str) -> bool:
        """No advance reservation the job may not use overlaps [start, end) here."""
        for a_start, a_end, name, maintenance in self.advance:
            if a_start < end and a_end > start and (maintenance or name != reservation):
                return False
        return True

    def fits_window(self, need: Need, start: float, end: float, reservation: str = "") -> bool:
        """Does `need` fit from `start` (which must be now) until `end` without eating a reservation?"""
        if not self.fits_now(need):
            return False
        if self.advance and not self.usable(start, end, reservation):
            return False
        if not self.blocks:
            return True
        # Reservations count whole devices only: a fraction on an already shared device takes none.
        gpus = need.gpus
        if need.gpu_milli < GPU_MILLI and self.share_room(need.gpu_milli) is not None:
            gpus = 0
        for b_start, b_end, *_ in self.blocks:
            if b_end <= start or b_start >= end:
                continue
            g, c, m = self.available_at(max(b_start, start))
            if g < gpus or c < need.cpus or m < need.mem_mib:
                return False
        return True


def choose_devices(node: WorkNode, count: int) -> tuple[int, ...]:
    """Pick `count` free devices, keeping them inside as few topology domains as possible.

    A domain that can hold the whole request on its own is preferred, the tightest such domain first
    (best fit, so big islands stay whole for big requests); otherwise the fullest domains are used first.
    """
    if count == 0:
        return ()
    by_domain: dict[str | None, list[int]] = {}
    for gpu in node.gpus:
        if gpu.index in node.free:
            by_domain.setdefault(gpu.domain, []).append(gpu.index)
    groups = sorted(by_domain.values(), key=lambda g: (len(g), g[0]))
    for group in groups:
        if len(group) >= count:
            return tuple(group[:count])
    chosen: list[int] = []
    for group in reversed(groups):
        chosen.extend(group[: count - len(chosen)])
        if len(chosen) == count:
            break
    return tuple(sorted(chosen))


def device_with_room(node: WorkNode, room: int | None) -> int:
    """The device a fraction goes to: the lowest shared device with exactly `room` free milli, or (None) a
    whole free device from the tightest topology domain."""
    if room is None:
        return choose_devices(node, 1)[0]
    return min(i for i, used in node.shared.items() if GPU_MILLI - used == room)
