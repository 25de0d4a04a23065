"""The cgroup hierarchies an agent keeps its jobs in, one class per kind (see cgroups.py for the layout).

Each hierarchy has the agent's tree at `root` (the same name in every one) and knows where the agent itself
lives (`home`). `configure_job` sets what its controller enforces on a new job cgroup, `configure_leaf` what
a new leaf needs before a process may join it. Tracking hierarchies (v2, or the v1 freezer) also find and
kill every process of a cgroup.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from corral.agent import cgroup_bpf
from corral.agent.cpusets import format_cpu_list

log = logging.getLogger(__name__)

EMPTY_WAIT_S = 2.0
EMPTY_POLL_S = 0.01
FREEZE_WAIT_S = 2.0


class CgroupError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Limits:
    """What one job's cgroup enforces: its memory (0: none), its CPU ids (empty: all), the devices it may
    not open (major, minor: the GPUs of this node it does not hold), how many processes and threads its
    tasks may have at once (0: no limit)."""

    mem_mib: int = 0
    cpus: tuple[int, ...] = ()
    denied_devices: tuple[tuple[int, int], ...] = ()
    pids_max: int = 0


def write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read(path: Path) -> str:
    return path.read_text().strip()


def rmdir(path: Path) -> bool:
    """Remove an empty cgroup; False if it is still there (in use, or has children)."""
    try:
        path.rmdir()
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return True
        if exc.errno not in (errno.EBUSY, errno.ENOTEMPTY):
            log.warning("cannot remove cgroup %s: %s", path, exc)
        return False
    return True


def own_cgroup(mount: Path, controller: str | None) -> Path:
    """This process's cgroup in the hierarchy mounted at `mount`: v2's "0::" line (controller None) or the
    v1 line naming `controller`."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller is not None and controller in names.split(",")):
            return mount / path.lstrip("/")
    raise CgroupError(f"this process is in no {controller or 'cgroup v2'} hierarchy")


def mounts() -> list[tuple[Path, str, set[str]]]:
    """Every cgroup mount: (mount point, "cgroup2" or "cgroup", its v1 controllers)."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _, options = (right.split() + ["", ""])[:3]
        if fstype in ("cgroup", "cgroup2"):
            point = Path(left.split()[4].replace("\\040", " "))
            found.append((point, fstype, set(options.split(","))))
    return found


def v2_mount_of(path: Path) -> Path | None:
    """The cgroup2 mount holding `path`, if any (the longest mount point it lies under)."""
    points = [p for p, fstype, _ in mounts() if fstype == "cgroup2" and (path == p or p in path.parents)]
    return max(points, key=lambda p: len(p.parts), default=None)


def v1_mount(controller: str) -> Path | None:
    return next((p for p, fstype, options in mounts() if fstype == "cgroup" and controller in options), None)


class Hierarchy:
    label = ""  # "v2", "v1 memory": for describe()

    def __init__(self, root: Path, home: Path) -> None:
        self.root = root
        self.home = home

    def configure_root(self) -> None:
        """Make the (new or existing) root able to hold job cgroups."""

    def configure_job(self, job: Path, limits: Limits) -> None:
        """Enforce `limits` on a job cgroup just made."""

    def configure_leaf(self, leaf: Path) -> None:
        """Make a leaf just made under its job able to take processes."""


class V1Hierarchy(Hierarchy):
    """A v1 hierarchy of one controller: corral's tree at its top, or under the agent's own cgroup in it
    when the top is not writable (as in a container given only its own memory cgroup)."""

    controller = ""

    @classmethod
    def open(cls, name: str) -> Self | None:
        mount = v1_mount(cls.controller)
        if mount is None:
            return None
        home = own_cgroup(mount, cls.controller)
        for parent in dict.fromkeys((mount, home)):
            try:
                (parent / name).mkdir(exist_ok=True)
            except PermissionError:
                continue
            except OSError as exc:
                if exc.errno != errno.EROFS:
                    raise
                continue
            if not os.access(parent / name, os.W_OK):  # another user's tree of that name
                continue
            hierarchy = cls(parent / name, home)
            hierarchy.configure_root()
            return hierarchy
        raise CgroupError(f"cannot create {name} in the v1 {cls.controller} hierarchy at {mount} "
                          f"nor under {home}")

    @property
    def label(self) -> str:  # type: ignore[override]
        return f"v1 {self.controller}"

    def procs(self, path: Path) -> list[int]:
        """Every process in `path` and below."""
        pids: list[int] = []
        for procs in [path / "cgroup.procs", *path.glob("*/cgroup.procs")]:
            with contextlib.suppress(FileNotFoundError):
                pids.extend(int(pid) for pid in procs.read_text().split())
        return pids


class V1Memory(V1Hierarchy):
    """memory.limit_in_bytes, and memsw (memory + swap) at the same value where the kernel accounts swap:
    a job over its memory is OOM-killed rather than swapped. memory.oom_control counts the kills."""

    controller = "memory"

    def configure_job(self, job: Path, limits: Limits) -> None:
        if limits.mem_mib > 0:
            write(job / "memory.limit_in_bytes", str(limits.mem_mib << 20))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting on this kernel
                write(job / "memory.memsw.limit_in_bytes", str(limits.mem_mib << 20))

    def oom_killed(self, leaf: Path) -> bool:
        try:
            lines = (leaf / "memory.oom_control").read_text().splitlines()
        except OSError:
            return False
        counts = dict(line.split() for line in lines if line)
        return int(counts.get("oom_kill", "0")) > 0


class V1Cpuset(V1Hierarchy):
    """cpuset.cpus of the job; a new v1 cpuset is empty (no process may join) until given cpus and mems, so
    the root and each leaf copy their parent's."""

    controller = "cpuset"

    def configure_root(self) -> None:
        self._inherit(self.root)

    def configure_job(self, job: Path, limits: Limits) -> None:
        write(job / "cpuset.mems", read(job.parent / "cpuset.mems"))
        write(job / "cpuset.cpus", format_cpu_list(limits.cpus) or read(job.parent / "cpuset.cpus"))

    def configure_leaf(self, leaf: Path) -> None:
        self._inherit(leaf)

    def _inherit(self, path: Path) -> None:
        for name in ("cpuset.cpus", "cpuset.mems"):
            if not read(path / name):
                write(path / name, read(path.parent / name))

    def cpus_of(self, job: Path) -> str:
        return read(job / "cpuset.cpus")


class V1Devices(V1Hierarchy):
    """devices.deny of each GPU the job does not hold (Slurm's ConstrainDevices); leaves inherit it."""

    controller = "devices"

    def configure_job(self, job: Path, limits: Limits) -> None:
        for major, minor in limits.denied_devices:
            write(job / "devices.deny", f"c {major}:{minor} rwm")


class V1Pids(V1Hierarchy):
    """pids.max of the job: a fork bomb stops there (fork fails with EAGAIN) and the node's own processes
    can still start; leaves count against it."""

    controller = "pids"

    def configure_job(self, job: Path, limits: Limits) -> None:
        if limits.pids_max > 0:
            write(job / "pids.max", str(limits.pids_max))


class V1Freezer(V1Hierarchy):
    """Process tracking on a host without cgroup v2: freeze the cgroup (nothing can fork any more), SIGKILL
    every process in it, thaw it so the kills are delivered."""

    controller = "freezer"

    def kill(self, path: Path) -> None:
        write(path / "freezer.state", "FROZEN")
        deadline = time.monotonic() + FREEZE_WAIT_S
        while read(path / "freezer.state") != "FROZEN" and time.monotonic() < deadline:
            time.sleep(EMPTY_POLL_S)
        for pid in self.procs(path):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        write(path / "freezer.state", "THAWED")

    def populated(self, path: Path) -> bool:
        try:
            return bool(self.procs(path))
        except OSError:
            return False


class Unified(Hierarchy):
    """The cgroup v2 hierarchy: tracking (cgroup.kill, cgroup.events), memory, cpuset and pids where the
    root's parent delegates them, devices where the agent may load eBPF programs."""

    label = "v2"
    OFFERED = ("memory", "cpuset", "pids")

    def __init__(self, root: Path, home: Path, controllers: frozenset[str]) -> None:
        super().__init__(root, home)
        self.controllers = controllers
        # v2 has no devices files: its filter is an eBPF program (cgroup_bpf.py), None if it can be loaded.
        self.device_filter_error = cgroup_bpf.unavailable()

    @classmethod
    def open(cls, root: Path) -> Unified:
        mount = v2_mount_of(root)
        if mount is None:
            raise CgroupError(f"{root} is not on a cgroup v2 file system")
        try:
            root.mkdir(exist_ok=True)
            if not os.access(root, os.W_OK):
                raise PermissionError(errno.EACCES, f"{os.strerror(errno.EACCES)} (another user's tree)")
            offered = set((root / "cgroup.controllers").read_text().split())
            wanted = [c for c in cls.OFFERED if c in offered]
            if wanted:
                write(root / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        except OSError as exc:
            raise CgroupError(f"cannot set up {root}: {exc.strerror or exc}") from exc
        return cls(root, own_cgroup(mount, None), frozenset(wanted))

    def configure_job(self, job: Path, limits: Limits) -> None:
        if self.controllers:  # each leaf's own memory.events tells which of them went over
            write(job / "cgroup.subtree_control", " ".join(f"+{c}" for c in self.controllers))
        if limits.mem_mib > 0 and "memory" in self.controllers:
            write(job / "memory.max", str(limits.mem_mib << 20))
            with contextlib.suppress(FileNotFoundError):  # no swap accounting on this kernel
                write(job / "memory.swap.max", "0")
        if limits.cpus and "cpuset" in self.controllers:
            write(job / "cpuset.cpus", format_cpu_list(limits.cpus))
        if limits.pids_max > 0 and "pids" in self.controllers:
            write(job / "pids.max", str(limits.pids_max))
        if limits.denied_devices:
            cgroup_bpf.deny(job, limits.denied_devices)

    def oom_killed(self, leaf: Path) -> bool:
        try:
            text = (leaf / "memory.events").read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if line)
        return int(counts.get("oom_kill", "0")) > 0

    def cpus_of(self, job: Path) -> str:
        return read(job / "cpuset.cpus")

    def kill(self, path: Path) -> None:
        write(path / "cgroup.kill", "1")

    def populated(self, path: Path) -> bool:
        try:
            return "populated 1" in (path / "cgroup.events").read_text()
        except OSError:
            return False


Tracker = Unified | V1Freezer


async def wait_empty(tracker: Tracker, path: Path) -> None:
    deadline = time.monotonic() + EMPTY_WAIT_S
    while tracker.populated(path) and time.monotonic() < deadline:
        await asyncio.sleep(EMPTY_POLL_S)
    if tracker.populated(path):
        log.warning("%s: processes left after the kill", path)
