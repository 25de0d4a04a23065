"""Per-job and per-step cgroups (cgroup v2), as Slurm's proctrack/cgroup and task/cgroup plugins give.

Layout under the agent's cgroup root (--cgroup-root, default /sys/fs/cgroup/corral-<node>: one per agent, so
that several agents on one host never touch each other's jobs):

    <root>/job_<id>/            memory.max from the job's memory on this node; cgroup.kill ends it all
    <root>/job_<id>/batch/      the job's own tasks (the batch shell, or every task of a non-batch job)
    <root>/job_<id>/step_<n>/   the tasks of step n (srun inside the allocation)

Tasks only ever live in the leaves (cgroup v2's no-internal-process rule). Whatever a task starts stays in
its cgroup whatever it does (setsid, double fork), so when a job or step ends everything it left is found
in cgroup.procs and killed through cgroup.kill: no orphan survives it.

A task is placed in its leaf before it runs any code of its own: the agent moves itself into the leaf for
the duration of the fork (Popen returns once the child has exec'd), then moves back. Popen has no way to
start a child in a given cgroup (clone3's CLONE_INTO_CGROUP is not exposed), and a preexec_fn is not safe
in a threaded process. While the agent sits in the leaf (about a millisecond) it is counted against the
job's memory limit.

Controllers: memory (memory.max, and memory.events' oom_kill for OUT_OF_MEMORY) is used when the root's
parent delegates it. CPU sets are not applied: the agent is not told which CPUs a job holds, only how
many. Device access is not limited: cgroup v2's device controller is an eBPF program the agent would have
to load (BPF_PROG_TYPE_CGROUP_DEVICE); tasks see only their GPUs through CUDA_VISIBLE_DEVICES.
"""
from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_MOUNT = Path("/sys/fs/cgroup")
USED_CONTROLLERS = ("memory",)
EMPTY_WAIT_S = 2.0
EMPTY_POLL_S = 0.01


class CgroupError(Exception):
    pass


def default_root(node: str) -> Path:
    return CGROUP_MOUNT / f"corral-{node}"


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _own_cgroup(mount: Path) -> Path:
    """This process's cgroup in the v2 hierarchy mounted at `mount` (the "0::" line)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        if line.startswith("0::"):
            return mount / line[3:].lstrip("/")
    raise CgroupError("this process is in no cgroup v2 hierarchy")


def _mount_of(path: Path) -> Path | None:
    """The cgroup2 mount holding `path`, if any (the longest mount point it lies under)."""
    best: Path | None = None
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        if not right.startswith("cgroup2 "):
            continue
        point = Path(left.split()[4].replace("\\040", " "))
        if (path == point or point in path.parents) and (best is None or len(point.parts) > len(best.parts)):
            best = point
    return best


class CgroupTree:
    """The agent's cgroup root. Build with `open()`, which says why not when the host does not allow it."""

    def __init__(self, root: Path, mount: Path, controllers: frozenset[str]) -> None:
        self.root = root
        self.controllers = controllers
        self._home = _own_cgroup(mount)  # where the agent lives, and returns to after each fork

    @classmethod
    def open(cls, root: Path) -> CgroupTree:
        """Create the root (if needed) and enable there the controllers its parent offers."""
        root = Path(os.path.abspath(root))
        mount = _mount_of(root)
        if mount is None:
            raise CgroupError(f"{root} is not on a cgroup v2 file system")
        try:
            root.mkdir(exist_ok=True)
            offered = set((root / "cgroup.controllers").read_text().split())
            wanted = [c for c in USED_CONTROLLERS if c in offered]
            if wanted:
                _write(root / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        except OSError as exc:
            raise CgroupError(f"cannot set up {root}: {exc.strerror or exc}") from exc
        return cls(root, mount, frozenset(wanted))

    def describe(self) -> str:
        """One line for the log and `corral nodes`."""
        missing = [c for c in USED_CONTROLLERS if c not in self.controllers]
        text = f"cgroup v2 at {self.root}"
        if missing:
            text += f", without {', '.join(missing)} (no memory limit, no OUT_OF_MEMORY)"
        return text

    def for_job(self, job_id: int) -> JobCgroup:
        return JobCgroup(self, self.root / f"job_{job_id}")

    def leftover_jobs(self) -> list[JobCgroup]:
        return [JobCgroup(self, path) for path in sorted(self.root.glob("job_*")) if path.is_dir()]

    @contextlib.contextmanager
    def agent_inside(self, leaf: Path) -> Iterator[None]:
        """The agent (all its threads) sits in `leaf` while the block runs; children forked then start there."""
        _write(leaf / "cgroup.procs", "0")
        try:
            yield
        finally:
            try:
                _write(self._home / "cgroup.procs", "0")
            except OSError as exc:  # the task started: only the agent is misplaced, not worth failing it
                log.error("cannot move the agent back to %s: %s", self._home, exc)


class JobCgroup:
    """One job's cgroup on this node and its leaves."""

    def __init__(self, tree: CgroupTree, path: Path) -> None:
        self.tree = tree
        self.path = path

    def leaf(self, name: str, mem_mib: int = 0) -> Path:
        """Create the job's cgroup (with its memory limit, when given and possible) and the leaf `name`."""
        try:
            if not self.path.exists():
                self.path.mkdir(exist_ok=True)
                if self.tree.controllers:  # each leaf's own memory.events tells which of them went over
                    _write(self.path / "cgroup.subtree_control", " ".join(f"+{c}" for c in self.tree.controllers))
            if mem_mib > 0 and "memory" in self.tree.controllers:
                _write(self.path / "memory.max", str(mem_mib << 20))
                with contextlib.suppress(FileNotFoundError):  # no swap accounting on this kernel
                    _write(self.path / "memory.swap.max", "0")
            leaf = self.path / name
            leaf.mkdir(exist_ok=True)
        except OSError as exc:
            raise CgroupError(f"cannot create cgroup {self.path / name}: {exc.strerror or exc}") from exc
        return leaf

    async def kill(self, name: str | None = None) -> None:
        """SIGKILL every process of the job (or of its leaf `name`), wait until they are gone, and remove
        the cgroups left empty."""
        target = self.path if name is None else self.path / name
        if not target.exists():
            return
        try:
            _write(target / "cgroup.kill", "1")
        except FileNotFoundError:
            return
        await _wait_empty(target)
        if name is not None:
            _rmdir(target)
        self.remove_if_empty()

    def remove_if_empty(self) -> None:
        """Remove the job's cgroup once no leaf is left (the job and all its steps are done here)."""
        if not self.path.exists():
            return
        for leaf in [p for p in self.path.iterdir() if p.is_dir()]:
            if not _populated(leaf):
                _rmdir(leaf)
        _rmdir(self.path)

    def oom_killed(self, name: str) -> bool:
        """Whether the kernel killed a process of the leaf `name` for going over the job's memory limit."""
        try:
            text = (self.path / name / "memory.events").read_text()
        except OSError:
            return False
        counts = dict(line.split() for line in text.splitlines() if line)
        return int(counts.get("oom_kill", "0")) > 0


def _populated(path: Path) -> bool:
    try:
        return "populated 1" in (path / "cgroup.events").read_text()
    except OSError:
        return False


async def _wait_empty(path: Path) -> None:
    deadline = time.monotonic() + EMPTY_WAIT_S
    while _populated(path) and time.monotonic() < deadline:
        await asyncio.sleep(EMPTY_POLL_S)
    if _populated(path):
        log.warning("%s: processes left after cgroup.kill", path)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY):
            log.warning("cannot remove cgroup %s: %s", path, exc)
