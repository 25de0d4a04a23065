"""Per-job and per-step cgroups, as Slurm's proctrack/cgroup and task/cgroup plugins give.

Layout: the agent's tree (one per agent, so that several agents on one host never touch each other's jobs)
is named like its v2 root (--cgroup-root, default corral-<cluster>-<node> in the cgroup2 mount, with the
cluster's id from --cluster-id: several clusters on one host name their nodes alike), and has the same
shape in every hierarchy it uses:

    <tree>/job_<id>/            the job's limits: memory, CPU set, devices; killing it ends it all
    <tree>/job_<id>/batch/      the job's own tasks (the batch shell, or every task of a non-batch job)
    <tree>/job_<id>/step_<n>/   the tasks of step n (srun inside the allocation)

The running agent holds an exclusive lock (flock) on its tree's directory in every hierarchy (claim()): a
second agent given the same tree refuses to start instead of killing the first one's jobs as leftovers,
so every job cgroup an agent finds in its claimed tree is provably its own cluster's and node's.

Tasks only ever live in the leaves (cgroup v2's no-internal-process rule). Whatever a task starts stays in
its cgroups whatever it does (setsid, double fork), so when a job or step ends everything it left is found
and killed by the tracking hierarchy: no orphan survives it. Tracking is cgroup v2 (cgroup.kill) where a
cgroup2 file system is mounted; on a v1-only host it is the v1 freezer (freeze, SIGKILL every process in
cgroup.procs, thaw).

Each controller is taken from cgroup v2 when the v2 root's parent delegates it, else from its v1 hierarchy
when the host mounts one (hybrid hosts mount v1 memory, cpuset, devices beside an empty cgroup2), as
Slurm's cgroup/v1 plugin does. In a v1 hierarchy the tree is at the top, or under the agent's own cgroup
there when the top is not writable (describe() names where).

- memory: v2 memory.max (+ swap.max 0), or v1 memory.limit_in_bytes (+ memsw at the same value), from the
  job's memory on this node. The kernel's OOM kill count (v2 memory.events, v1 memory.oom_control's
  oom_kill) in the task's leaf makes the job or step end OUT_OF_MEMORY.
- cpuset: the controller says how many CPUs a job has here, the agent picks which (cpusets.py): its
  cpuset.cpus (v1 also cpuset.mems, copied from the parent). On start the agent reads back the CPUs of the
  job cgroups it finds, so that it never hands them out twice.
- pids: v2 or v1 pids.max, the agent's --pids-max (default: 15% of the kernel's pid_max, systemd's
  DefaultTasksMax): how many processes and threads the job's tasks may have at once on this node. A fork
  bomb's fork fails there with EAGAIN, and the node's own processes can still start.
- devices: the device files of this node's GPUs the job does not hold are denied, as Slurm's
  ConstrainDevices: on cgroup v2 by an eBPF device filter attached to the job's cgroup (cgroup_bpf.py),
  else by v1 devices.deny. The GPUs' device files are NVML's (/dev/nvidia<minor>); without them (simulated
  GPUs, unless --gpu-device-dir) tasks see only their GPUs through CUDA_VISIBLE_DEVICES.

A task is placed in its leaves before it runs any code of its own: the agent moves itself into the leaf of
every hierarchy for the duration of the fork (Popen returns once the child has exec'd), then moves back.
Popen has no way to start a child in a given cgroup (clone3's CLONE_INTO_CGROUP is not exposed, and it
covers v2 only), and a preexec_fn is not safe in a threaded process. While the agent sits in the leaves
(tens of microseconds per hierarchy; milliseconds when the kernel waits for an RCU grace period to move a
process) it is counted against the job's memory limit and runs on its CPUs.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from corral.agent.cgroup_hierarchies import (
    CgroupError,
    Hierarchy,
    Limits,
    Tracker,
    Unified,
    V1Cpuset,
    V1Devices,
    V1Freezer,
    V1Hierarchy,
    V1Memory,
    V1Pids,
    mounts,
    own_cgroup,
    rmdir,
    wait_empty,
)
from corral.agent.cpusets import CpuAllocator, host_cores, parse_cpu_list

__all__ = ["CgroupError", "CgroupTree", "CgroupTreeTaken", "JobCgroup", "default_pids_max", "default_root",
           "delegated_root", "tree_name"]

log = logging.getLogger(__name__)

CGROUP_MOUNT = Path("/sys/fs/cgroup")
V1H = TypeVar("V1H", bound=V1Hierarchy)


class CgroupTreeTaken(CgroupError):
    """Another running agent holds the tree: starting would kill its jobs as leftovers."""


def tree_name(node: str, cluster_id: str | None) -> str:
    """corral-<cluster>-<node>; corral-<node> for an agent told no cluster id (one cluster on the host)."""
    return f"corral-{cluster_id}-{node}" if cluster_id else f"corral-{node}"


def default_root(node: str, cluster_id: str | None = None) -> Path | None:
    """tree_name() in the host's cgroup2 mount (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid
    host); None on a v1-only host."""
    mount = _v2_mount()
    return None if mount is None else mount / tree_name(node, cluster_id)


def delegated_root(node: str, cluster_id: str | None = None) -> Path | None:
    """For an agent that is not root: tree_name() under its own cgroup v2 when that cgroup is delegated to
    its user (the user owns it and its cgroup.procs, as systemd's Delegate=yes leaves them: `systemd-run
    --user --scope -p Delegate=yes corral up`), else None. Its jobs are tracked there (cgroup.kill); the
    limits need the controllers the delegation enables."""
    mount = _v2_mount()
    if mount is None:
        return None
    try:
        home = own_cgroup(mount, None)
        delegated = os.stat(home).st_uid == os.geteuid() and os.access(home / "cgroup.procs", os.W_OK)
    except (CgroupError, OSError):
        return None
    return home / tree_name(node, cluster_id) if delegated else None


def _v2_mount() -> Path | None:
    v2 = [point for point, fstype, _ in mounts() if fstype == "cgroup2"]
    return next((point for point in (CGROUP_MOUNT, CGROUP_MOUNT / "unified", *v2) if point in v2), None)


def default_pids_max() -> int:
    """15% of the kernel's limit on processes and threads (the smaller of pid_max and threads-max), as
    systemd's DefaultTasksMax: a job's fork bomb stops there, with room left for the node and other jobs."""
    limits = []
    for name in ("pid_max", "threads-max"):
        with contextlib.suppress(OSError, ValueError):
            limits.append(int(Path(f"/proc/sys/kernel/{name}").read_text()))
    return max(1, min(limits, default=32768) * 15 // 100)


class CgroupTree:
    """The agent's cgroups in every hierarchy it uses. Build with `open()`, which says why not when the host
    does not allow it."""

    def __init__(self, name: str, tracker: Tracker, memory: Unified | V1Memory | None,
                 cpuset: Unified | V1Cpuset | None, devices: Unified | V1Devices | None,
                 gpu_devices: Mapping[int, tuple[int, int]], missing: Mapping[str, str] | None = None,
                 pids: Unified | V1Pids | None = None, pids_max: int = 0) -> None:
        self.name = name
        self.tracker = tracker
        self.memory, self.cpuset, self.devices, self.pids = memory, cpuset, devices, pids
        self.gpu_devices = dict(gpu_devices)  # GPU index -> (major, minor) of its device file
        self.pids_max = pids_max  # each job's limit on processes and threads here (0: none)
        self.missing = dict(missing or {})  # controller -> why it is not used
        self.hierarchies: list[Hierarchy] = list(dict.fromkeys(
            h for h in (tracker, memory, cpuset, devices, pids) if h is not None))
        affinity = os.sched_getaffinity(0)
        self.cpus = CpuAllocator(affinity, host_cores(affinity))
        self._hold_cpus_of_existing_jobs()
        self._claims: list[int] = []  # the locked directories of the tree, while this process holds it

    def claim(self) -> None:
        """Take the tree for this process until it exits (an exclusive flock on its directory in every
        hierarchy), or raise CgroupTreeTaken naming who holds it: an agent kills the job cgroups it finds in
        its tree, so it must be the only one using the tree."""
        if self._claims:
            return
        try:
            for hierarchy in self.hierarchies:
                self._claims.append(_lock_directory(hierarchy.root))
        except CgroupError:
            self._unlock()
            raise

    def release(self) -> None:
        """Let the tree go, removing it from every hierarchy where it is empty (an agent that killed its
        tasks on stopping leaves no trace; one that left them running leaves their cgroups, and the tree)."""
        self._unlock()
        for hierarchy in self.hierarchies:
            rmdir(hierarchy.root)

    def _unlock(self) -> None:
        while self._claims:
            os.close(self._claims.pop())

    @property
    def root(self) -> Path:
        """The tracking hierarchy's tree (where leftover jobs are found)."""
        return self.tracker.root

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(name for name, h in (("memory", self.memory), ("cpuset", self.cpuset),
                                              ("devices", self.devices), ("pids", self.pids)) if h is not None)

    @classmethod
    def open(cls, root: Path | None, name: str | None = None,
             gpu_device_files: Mapping[int, Path] | None = None, pids_max: int = 0) -> CgroupTree:
        """The tree at the v2 `root` (None: no cgroup v2, track with the v1 freezer), named `name` (default
        the root's name) in the v1 hierarchies that give what v2 lacks. `gpu_device_files`: each GPU's
        device file, whose access the devices controller limits to the jobs holding the GPU. `pids_max`:
        each job's limit on its processes and threads (0: none, and no pids controller is used). Without
        tracking there is no tree (CgroupError); a controller that cannot be had is left out, and why is
        in `missing` (and describe())."""
        name = name or (root.name if root is not None else "")
        if not name:
            raise CgroupError("the cgroup tree needs a name")
        v2 = Unified.open(Path(os.path.abspath(root))) if root is not None else None
        missing: dict[str, str] = {}
        tracker: Tracker | None = v2 or _opened(V1Freezer, name, missing)
        if tracker is None:
            raise CgroupError(f"no cgroup v2 file system to track jobs with, and {missing['freezer']}")
        memory = v2 if v2 and "memory" in v2.controllers else _opened(V1Memory, name, missing)
        cpuset = v2 if v2 and "cpuset" in v2.controllers else _opened(V1Cpuset, name, missing)
        pids: Unified | V1Pids | None = None
        if pids_max > 0:
            pids = v2 if v2 and "pids" in v2.controllers else _opened(V1Pids, name, missing)
        devices: Unified | V1Devices | None = None
        try:
            devices_of = {index: _device_number(path) for index, path in (gpu_device_files or {}).items()}
        except CgroupError as exc:
            devices_of, missing["devices"] = {}, str(exc)
        if not gpu_device_files:
            missing["devices"] = "no GPU device files known (no GPUs, simulated ones, or none from NVML)"
        elif devices_of:
            devices = v2 if v2 and v2.device_filter_error is None else _opened(V1Devices, name, missing)
            if devices is None and v2:
                missing["devices"] = f"{v2.device_filter_error}, and {missing['devices']}"
        return cls(name, tracker, memory, cpuset, devices, devices_of, missing, pids, pids_max if pids else 0)

    def describe(self) -> str:
        """One line for the log and `corral nodes`: what is enforced, from where, and what is not and why."""
        by_version: dict[str, list[str]] = {}
        for what, h in (("tracking", self.tracker), ("memory", self.memory), ("cpuset", self.cpuset),
                        ("devices", self.devices), ("pids", self.pids)):
            if h is not None:
                by_version.setdefault("v2" if isinstance(h, Unified) else "v1", []).append(what)
        enforced = " + ".join(f"{version} {', '.join(whats)}" for version, whats in by_version.items())
        roots = "; ".join(f"{h.label} at {h.root}" for h in self.hierarchies)
        text = f"cgroup {enforced} ({roots})"
        if self.pids is not None:
            text += f"; at most {self.pids_max} processes and threads per job"
        for controller, consequence in (("memory", "no memory limit, no OUT_OF_MEMORY"),
                                        ("cpuset", "no CPU binding"), ("devices", "no GPU device limit"),
                                        ("pids", "no process limit")):
            if controller in self.missing:
                text += f"; {consequence}: {self.missing[controller]}"
        return text

    def for_job(self, job_id: int) -> JobCgroup:
        return JobCgroup(self, job_id)

    def leftover_jobs(self) -> list[JobCgroup]:
        """Job cgroups found in any hierarchy (left by an earlier agent)."""
        ids = {int(path.name[4:]) for h in self.hierarchies for path in h.root.glob("job_*")
               if path.is_dir() and path.name[4:].isdigit()}
        return [JobCgroup(self, job_id) for job_id in sorted(ids)]

    def limits_for(self, job_id: int, mem_mib: int, cpus: int, gpus: Sequence[int]) -> Limits:
        return Limits(
            mem_mib=mem_mib,
            cpus=self.cpus.take(job_id, cpus) if self.cpuset is not None and cpus > 0 else (),
            denied_devices=tuple(dev for index, dev in sorted(self.gpu_devices.items()) if index not in gpus),
            pids_max=self.pids_max,
        )

    def _hold_cpus_of_existing_jobs(self) -> None:
        if not isinstance(self.cpuset, (Unified, V1Cpuset)):
            return
        for job in self.cpuset.root.glob("job_*"):
            with contextlib.suppress(OSError, ValueError):
                self.cpus.hold(int(job.name[4:]), parse_cpu_list(self.cpuset.cpus_of(job)))


class JobCgroup:
    """One job's cgroups on this node (one per hierarchy) and their leaves."""

    def __init__(self, tree: CgroupTree, job_id: int) -> None:
        self.tree = tree
        self.job_id = job_id
        self.path = tree.tracker.root / f"job_{job_id}"  # the tracking one, for the log

    def _paths(self) -> list[Path]:
        return [h.root / f"job_{self.job_id}" for h in self.tree.hierarchies]

    def leaf(self, name: str, mem_mib: int = 0, cpus: int = 0, gpus: Sequence[int] = ()) -> list[Path]:
        """Create the job's cgroups (with its limits: memory, `cpus` CPUs, only its `gpus`) where they do not
        exist yet, and the leaf `name` in each; the leaves, one per hierarchy."""
        leaves = []
        limits: Limits | None = None
        for hierarchy, job in zip(self.tree.hierarchies, self._paths(), strict=True):
            try:
                if not job.exists():
                    job.mkdir()
                    try:
                        limits = limits or self.tree.limits_for(self.job_id, mem_mib, cpus, gpus)
                        hierarchy.configure_job(job, limits)
                    except OSError:
                        rmdir(job)  # never left for a later leaf() to take as set up
                        raise
                leaf = job / name
                if not leaf.exists():
                    leaf.mkdir()
                    hierarchy.configure_leaf(leaf)
            except OSError as exc:
                raise CgroupError(f"cannot create cgroup {job / name}: {exc.strerror or exc}") from exc
            leaves.append(leaf)
        return leaves

    async def kill(self, name: str | None = None) -> None:
        """SIGKILL every process of the job (or of its leaf `name`), wait until they are gone, and remove
        the cgroups left empty."""
        tracked = self.path if name is None else self.path / name
        if tracked.exists():
            try:
                self.tree.tracker.kill(tracked)
            except FileNotFoundError:
                pass
            else:
                await wait_empty(self.tree.tracker, tracked)
        if name is not None:
            for job in self._paths():
                rmdir(job / name)
        self.remove_if_empty()

    def remove_if_empty(self) -> None:
        """Remove the job's cgroups once no leaf is in use (the job and all its steps are done here); its
        CPUs are free again once they are gone."""
        for job in self._paths():
            if job.exists():
                for leaf in [p for p in job.iterdir() if p.is_dir()]:
                    rmdir(leaf)
                rmdir(job)
        if not any(job.exists() for job in self._paths()):
            self.tree.cpus.release(self.job_id)

    def oom_killed(self, name: str) -> bool:
        """Whether the kernel killed a process of the leaf `name` for going over the job's memory limit."""
        memory = self.tree.memory
        return memory is not None and memory.oom_killed(memory.root / f"job_{self.job_id}" / name)


def _lock_directory(path: Path) -> int:
    """An exclusive flock on the directory `path`, held as long as the returned descriptor is open."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise CgroupError(f"cannot lock the cgroup tree {path}: {exc.strerror or exc}") from exc
        raise CgroupTreeTaken(
            f"the cgroup tree {path} is held by another running agent{_holders(path)}: each agent on a host "
            "needs its own (give each cluster its own --cluster-id, or --cgroup-root)") from None
    return fd


def _holders(root: Path) -> str:
    """" (pid N)" for the processes holding a flock on `root`, from /proc/locks, where it can tell."""
    try:
        status = os.stat(root)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return ""
    file_id = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:{status.st_ino}"
    pids = sorted({fields[4] for fields in (line.split() for line in lines)
                   if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == file_id})
    return f" (pid {', '.join(pids)})" if pids else ""


def _opened(kind: type[V1H], name: str, missing: dict[str, str]) -> V1H | None:
    """The tree in the host's v1 hierarchy of `kind`'s controller; None (and why, in `missing`) if none."""
    try:
        hierarchy = kind.open(name)
    except (CgroupError, OSError) as exc:
        missing[kind.controller] = f"cannot use the v1 {kind.controller} hierarchy: {exc}"
        return None
    if hierarchy is None:
        missing[kind.controller] = f"no {kind.controller} controller (not in cgroup v2, no v1 hierarchy)"
    return hierarchy


def _device_number(path: Path) -> tuple[int, int]:
    try:
        status = os.stat(path)
    except OSError as exc:
        raise CgroupError(f"cannot read the GPU device file {path}: {exc.strerror or exc}") from exc
    if not stat.S_ISCHR(status.st_mode):
        raise CgroupError(f"the GPU device file {path} is not a character device")
    return os.major(status.st_rdev), os.minor(status.st_rdev)

