"""A launch's container on this node (decision 0020): what the job and step runners call to run their tasks
in it. `open()` leases the image from the node's cache (imported at most once per node, in a thread: a
large image must not hold up the agent's loop) or finds the job's named container; `task_argv()` writes one
task's bundle and returns the argv its leader starts, as the job's user, in the job's cgroup, with the
task's own environment (SLURM_*, torch variables, CUDA_VISIBLE_DEVICES) and only the job's GPUs' device
files on this node; `close()` gives the lease back and removes the bundles. A named container's root
filesystem stays in the job's directory for the job's later steps."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from corral.agent.container_images import CachedImage, ImageCache, ImageError
from corral.agent.container_runtime import (
    BundleRequest,
    ContainerError,
    ContainerSpec,
    TaskUser,
    named_rootfs,
    node_has_runtime,
    prepare_task,
    subordinate_id,
    user_can_reach,
)
from corral.agent.identity import TaskIdentity, agent_identity
from corral.container_options import ContainerOptionError, Mount, check_name, parse_env_names, parse_mounts
from corral.protocol import ContainerLaunch

DEFAULT_CACHE_LIMIT_BYTES = 20 << 30


def kill_left_containers(state_dir: Path) -> list[int]:
    """SIGKILL the init process of each container runc recorded in `state_dir` that still runs: runc killed
    (the SIGKILL after a kill's grace) leaves its container running, in a session of its own, and a PID 1
    that has no SIGTERM handler ignores the SIGTERM runc forwards. Its PID namespace goes with it."""
    killed = []
    for state in state_dir.glob("*/state.json"):
        try:
            record = json.loads(state.read_text())
            pid, started = int(record["init_process_pid"]), int(record["init_process_start"])
            with open(f"/proc/{pid}/stat") as stat:
                # The fields after the command (which may hold spaces): state is field 3, start time field 22.
                if int(stat.read().rpartition(")")[2].split()[19]) != started:
                    continue  # that pid is another process now
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (OSError, ValueError, KeyError, IndexError):
            continue  # gone already, or no record of one
    return killed


def lease_name(job_id: int, step_id: int | None) -> str:
    """A job's or step's name for its container's bundles and its hold on the image."""
    return f"job{job_id}" + ("" if step_id is None else f".{step_id}")


def abandon_container(support: ContainerSupport | None, job_dir: Path, job_id: int, step_id: int | None,
                      node: str) -> None:
    """What an earlier agent's job or step left of its container when its tasks cannot be adopted (they are
    killed, or died): kill what runc left running, remove the bundles, give the image's lease back."""
    if support is None:
        return
    container = TaskContainer(ContainerLaunch(image="-"), support, job_dir=job_dir,
                              lease=lease_name(job_id, step_id), identity=None, gpus=[], node=node)
    container.take_over()
    container.close()


class ContainerStartError(Exception):
    """The container cannot be started; the message says what to do. Nothing was left started."""


@dataclass(frozen=True)
class ContainerSupport:
    """This node's means to run containers: its image cache and each GPU's device file. An agent has one
    when the node has the runtime (container_runtime.node_has_runtime) and containers are not turned off."""

    cache: ImageCache
    device_files: Mapping[int, Path] = field(default_factory=dict)

    @staticmethod
    def detect(cache_dir: Path, limit_bytes: int, device_files: Mapping[int, Path],
               insecure_registries: frozenset[str] = frozenset()) -> ContainerSupport | None:
        if not node_has_runtime():
            return None
        return ContainerSupport(ImageCache(cache_dir, limit_bytes, insecure_registries=insecure_registries),
                                dict(device_files))


class TaskContainer:
    """One job's or step's container on this node."""

    def __init__(self, launch: ContainerLaunch, support: ContainerSupport | None, *, job_dir: Path, lease: str,
                 identity: TaskIdentity | None, gpus: Sequence[int], node: str = "") -> None:
        self.launch = launch
        self._support = support
        self._job_dir = job_dir
        self._lease = lease  # this job's or step's name: of its bundles, and of its hold on the image
        # The hold's name in the cache, which the nodes of one `corral up` cluster share: with the node's.
        self._cache_lease = f"{lease}@{node}" if node else lease
        self._identity = identity or agent_identity()
        self._gpus = list(gpus)
        self._image: CachedImage | None = None
        self._rootfs: Path | None = None
        self._bundles: list[Path] = []
        self._shared: list[Mount] = []  # the node's files the tasks need inside (share_file)

    @property
    def _user(self) -> TaskUser:
        who = self._identity
        if who is None:
            return TaskUser(os.geteuid(), os.getegid())
        return TaskUser(who.uid, who.gid, who.groups, who.home)

    async def open(self) -> None:
        """Lease the image (importing it if this node has not got it) or find the named container."""
        if self._support is None:
            raise ContainerStartError("this node cannot run containers (runc, unshare and uidmap's newuidmap "
                                      "are needed, or its agent runs with --no-containers): submit with "
                                      "--container-image only to nodes that show the feature runc in corral nodes")
        try:
            self.spec()  # the options' grammars, before anything is imported
            if self.launch.name:
                check_name(self.launch.name)  # it names a directory of the job's
        except ContainerOptionError as exc:
            raise ContainerStartError(str(exc)) from None
        named = self._named_path()
        if not self.launch.image:
            if named is None or not named.is_dir():
                raise ContainerStartError(f"no container named {self.launch.name!r} on this node for this job: "
                                          "start it with --container-image (and --container-name) first")
            self._rootfs = named
            return
        user = self._user
        try:
            self._image = await asyncio.to_thread(self._support.cache.acquire, self.launch.image,
                                                  self._cache_lease, lambda path: user_can_reach(path, user))
        except ImageError as exc:
            raise ContainerStartError(str(exc)) from None
        except OSError as exc:
            raise ContainerStartError(f"cannot import image {self.launch.image}: {exc}") from None
        if named is None:
            self._rootfs = self._image.rootfs
            return
        try:
            self._ensure_job_dir()
            self._rootfs = await asyncio.to_thread(named_rootfs, self._job_dir, self.launch.name,
                                                   self._image.rootfs, user)
        except (OSError, ContainerError) as exc:
            self.close()
            raise ContainerStartError(f"cannot make container {self.launch.name!r}: {exc}") from None

    def take_over(self) -> None:
        """An adopted launch's container, opened by an earlier agent on this node: hold its image's lease
        (found in the cache by this launch's lease name) and its tasks' bundles, so that close() gives the
        image back and removes them when the tasks end. Without this the lease outlived the tasks and the
        image was never evicted. A lease the cache no longer has (the cache cleared) is nothing to give back."""
        if self.launch.image and self._support is not None:
            self._image = self._support.cache.leased(self._cache_lease)
        bundles = self._job_dir / "bundles"
        if bundles.is_dir():
            self._bundles = sorted(path for path in bundles.iterdir()
                                   if path.name.startswith(f"{self._lease}.")
                                   and path.name[len(self._lease) + 1:].isdigit())

    def share_file(self, path: Path) -> str:
        """Show a file of the node's to the tasks, read-only (a job's script, written by the agent): its path
        inside, under the container's own /tmp, where a mount point can be made in any image."""
        inside = f"/tmp/.corral/{path.name}"
        self._shared.append(Mount(str(path), inside, read_only=True))
        return inside

    def spec(self) -> ContainerSpec:
        launch = self.launch
        mounts = parse_mounts(launch.mounts) + tuple(self._shared)
        return ContainerSpec(image=launch.image, mounts=mounts, workdir=launch.workdir or None,
                             env=parse_env_names(launch.env), mount_home=launch.mount_home,
                             name=launch.name or None, remap_root=launch.remap_root)

    def task_argv(self, rank: int, argv: list[str], env: Mapping[str, str], cwd: str) -> list[str]:
        """Write the task's bundle; the argv that runs it in the container (ContainerStartError if it cannot)."""
        assert self._rootfs is not None, "open() first"
        spec, user = self.spec(), self._user
        # As pyxis: the image's PATH, unless --container-env names PATH (the node's means nothing inside).
        inside = {k: v for k, v in env.items() if k != "PATH" or "PATH" in spec.env}
        name = self._identity.name if self._identity is not None else ""
        request = BundleRequest(
            spec=spec, user=user, rootfs=self._rootfs, argv=argv, env=inside, cwd=self._inner_cwd(spec, cwd),
            device_files=[str(self._support.device_files[i]) for i in self._gpus
                          if self._support is not None and i in self._support.device_files],
            rootfs_writable=self._rootfs == self._named_path(),  # a named container is the job's own copy
            subordinate_uid=subordinate_id(name, "/etc/subuid") if name else None,
            subordinate_gid=subordinate_id(name, "/etc/subgid") if name else None)
        bundle = self._job_dir / "bundles" / f"{self._lease}.{rank}"
        try:
            self._ensure_job_dir()
            command = prepare_task(request, bundle, f"corral-{self._lease}.{rank}")
        except ContainerError as exc:
            raise ContainerStartError(str(exc)) from None
        except OSError as exc:
            raise ContainerStartError(f"cannot write the container's bundle {bundle}: {exc}") from None
        self._bundles.append(bundle)
        return command

    def close(self) -> None:
        """Once the tasks are gone: kill what runc left of their containers, give the image back (the cache
        may evict it now) and remove the tasks' bundles."""
        for bundle in self._bundles:
            kill_left_containers(bundle / "state")
            shutil.rmtree(bundle, ignore_errors=True)
        self._bundles.clear()
        if self._image is not None and self._support is not None:
            try:
                self._support.cache.release(self._image.key, self._cache_lease)
            except OSError:
                pass  # the lease file stays: the image is kept, never lost
            self._image = None

    def _named_path(self) -> Path | None:
        return self._job_dir / "containers" / self.launch.name / "rootfs" if self.launch.name else None

    def _ensure_job_dir(self) -> None:
        """The job's directory on this node, the user's own (0700), as the batch script's."""
        self._job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if os.geteuid() == 0 and self._identity is not None:
            os.chown(self._job_dir, self._identity.uid, self._identity.gid)

    def _inner_cwd(self, spec: ContainerSpec, cwd: str) -> str:
        """--container-workdir; else the job's directory where a mount brings it in; else /."""
        if spec.workdir:
            return spec.workdir
        visible = [m.target for m in spec.mounts if m.source == m.target]
        if spec.mount_home and self._identity is not None:
            visible.append(self._identity.home)
        if any(cwd == path or cwd.startswith(path.rstrip("/") + "/") for path in visible):
            return cwd
        return "/"
