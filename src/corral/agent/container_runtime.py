"""Running a task in a container with runc, rootless, as the job's user (decision 0020).

The task leader starts the task as the job's user inside the job's cgroup (task_leader.c); for a
containerised task its argv is `runc --root STATE run --bundle BUNDLE ID`, so runc, and everything in the
container, runs as that user, in that cgroup: runc finds no cgroup it may write and, rootless on cgroup v1,
leaves its processes where they are. The bundle's config maps only the user's own uid and gid into the
container (as themselves, or as 0 with remap_root), so nothing in it is root on the host. Devices cannot be
created in a user namespace: the job's GPUs' device files (and only those) are bind-mounted in.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from corral.container_options import ContainerOptionError, Mount, parse_mounts

__all__ = ["ContainerError", "Mount", "parse_mounts"]  # the grammar lives with the options

RUNTIME = "runc"
# What a node needs to run containers as its users (decision 0020): the runtime, unshare, and newuidmap
# and newgidmap (Debian's uidmap) to map the one subordinate id a container uses.
RUNTIME_TOOLS = (RUNTIME, "unshare", "newuidmap", "newgidmap")
OUTER_USER, OUTER_SUBORDINATE = 0, 1
CONTAINER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ContainerError(ContainerOptionError):
    """A container that cannot be started, with what to do about it."""


@dataclass(frozen=True)
class ContainerSpec:
    """What the user asked for (the pyxis flags), as the agent receives it."""
    image: str
    mounts: tuple[Mount, ...] = ()
    workdir: str | None = None
    env: tuple[str, ...] = ()  # names of host (job) variables that override the image's
    mount_home: bool = True
    name: str | None = None
    remap_root: bool = False


@dataclass(frozen=True)
class TaskUser:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()
    home: str | None = None


@dataclass
class BundleRequest:
    spec: ContainerSpec
    user: TaskUser
    rootfs: Path
    argv: list[str]
    env: dict[str, str]
    cwd: str
    device_files: list[str] = field(default_factory=list)
    rootfs_writable: bool = False
    subordinate_uid: int | None = None
    subordinate_gid: int | None = None


def find_runtime() -> str | None:
    """The runtime's path on this node, or None (the node then does not offer containers)."""
    return shutil.which(RUNTIME)


def node_has_runtime() -> bool:
    """Whether this node can run containers: what its agent reports as the feature `runc`."""
    return all(shutil.which(tool) for tool in RUNTIME_TOOLS)


def user_can_reach(path: str, user: TaskUser) -> bool:
    """Whether `user` may read path (search every directory above it, read it), by its mode bits."""
    groups = {user.gid, *user.groups}

    def allowed(info: os.stat_result, bit: int) -> bool:
        if user.uid == info.st_uid:
            return bool(info.st_mode & (bit << 6))
        if info.st_gid in groups:
            return bool(info.st_mode & (bit << 3))
        return bool(info.st_mode & bit)

    real = Path(os.path.realpath(path))
    try:
        for parent in reversed(real.parents):
            if not allowed(os.stat(parent), 1):
                return False
        return allowed(os.stat(real), 4)
    except OSError:
        return False


def check_mounts(mounts: tuple[Mount, ...], user: TaskUser) -> None:
    for mount in mounts:
        if not os.path.exists(mount.source):
            raise ContainerError(f"--container-mounts: {mount.source} does not exist on this node")
        if not user_can_reach(mount.source, user):
            raise ContainerError(f"--container-mounts: {mount.source} is not readable by uid {user.uid}; "
                                 "mount a path you can read (check its and its parents' permissions)")


def _bind(source: str, target: str, read_only: bool) -> dict:
    options = ["rbind", "nosuid", "nodev"] + (["ro"] if read_only else [])
    return {"destination": target, "type": "none", "source": source, "options": options}


def _device_bind(path: str) -> dict:
    """A device file under the container's /dev (a tmpfs, where runc may make the mount point) by its name."""
    return {"destination": f"/dev/{os.path.basename(path)}", "type": "none", "source": path,
            "options": ["bind", "nosuid"]}


def _inner_mappings(inner: int, remap_root: bool) -> list[dict]:
    """The container's ids, as ids of the user namespace runc runs in (see runtime_argv): there the user
    is 0 and one of its subordinate ids is 1."""
    if remap_root:
        return [{"containerID": 0, "hostID": OUTER_USER, "size": 1}]
    return [{"containerID": 0, "hostID": OUTER_SUBORDINATE, "size": 1},
            {"containerID": inner, "hostID": OUTER_USER, "size": 1}]


def subordinate_id(user_name: str, path: str) -> int | None:
    """The first id of the user's range in /etc/subuid or /etc/subgid, if it has one."""
    try:
        with open(path) as file:
            for line in file:
                name, _, rest = line.strip().partition(":")
                if name == user_name and rest:
                    return int(rest.split(":")[0])
    except (OSError, ValueError):
        return None
    return None


def bundle_config(request: BundleRequest) -> dict:
    """The OCI runtime config (config.json) for one task."""
    spec, user = request.spec, request.user
    inner_uid, inner_gid = (0, 0) if spec.remap_root else (user.uid, user.gid)
    env = {"PATH": CONTAINER_PATH, **request.env}
    if spec.env:
        env.update({name: request.env[name] for name in spec.env if name in request.env})
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "nosuid", "noexec",
                                                                            "nodev", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]},
    ]
    mounts += [_device_bind(device) for device in request.device_files]
    if spec.mount_home and user.home and os.path.isdir(user.home):
        mounts.append(_bind(user.home, user.home, False))
    mounts += [_bind(mount.source, mount.target, mount.read_only) for mount in spec.mounts]
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": inner_uid, "gid": inner_gid},
                    "args": request.argv, "env": [f"{key}={value}" for key, value in env.items()],
                    "cwd": spec.workdir or request.cwd, "noNewPrivileges": True,
                    "capabilities": {"bounding": [], "effective": [], "permitted": [], "ambient": []}},
        "root": {"path": str(request.rootfs), "readonly": not request.rootfs_writable},
        "hostname": os.uname().nodename,
        "mounts": mounts,
        "linux": {
            "uidMappings": _inner_mappings(inner_uid, spec.remap_root),
            "gidMappings": _inner_mappings(inner_gid, spec.remap_root),
            "namespaces": [{"type": kind} for kind in ("pid", "ipc", "uts", "mount", "user")],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def _chown_tree(path: Path, uid: int, gid: int) -> None:
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def named_rootfs(job_dir: Path, name: str, image_rootfs: Path, user: TaskUser) -> Path:
    """The job's writable copy of the image for container `name`, made by its first step and kept for
    the next ones (what makes a named container keep its state), owned by the user."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise ContainerError(f"--container-name {name!r}: use letters, digits, - and _")
    rootfs = job_dir / "containers" / name / "rootfs"
    if not rootfs.exists():
        partial = rootfs.with_name("rootfs.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(image_rootfs, partial, symlinks=True)
        _chown_tree(partial, user.uid, user.gid)
        os.rename(partial, rootfs)
    return rootfs


def prepare_task(request: BundleRequest, bundle_dir: Path, container_id: str) -> list[str]:
    """Write the task's bundle (readable by the user only) and return the argv that runs it: the task
    leader runs this argv as the user, in the job's cgroup."""
    runtime = find_runtime()
    if runtime is None:
        raise ContainerError(f"this node has no container runtime ({RUNTIME} is not installed): submit with "
                             "--constraint=runc so the job runs where it is")
    argv = runtime_argv(request, runtime)  # refused before anything is written
    check_mounts(request.spec.mounts, request.user)
    for device in request.device_files:
        if not stat.S_ISCHR(os.stat(device).st_mode):
            raise ContainerError(f"{device} is not a character device")
    bundle_dir.mkdir(parents=True, exist_ok=True)
    state_dir = bundle_dir / "state"
    state_dir.mkdir(exist_ok=True)
    (bundle_dir / "config.json").write_text(json.dumps(bundle_config(request)))
    for path in (bundle_dir, state_dir, bundle_dir / "config.json"):
        os.chown(path, request.user.uid, request.user.gid)
    os.chmod(bundle_dir, 0o700)
    return argv + ["--root", str(state_dir), "run", "--bundle", str(bundle_dir), container_id]


def runtime_argv(request: BundleRequest, runtime: str) -> list[str]:
    """runc, in a user and mount namespace of its own where the user is 0 (and, without remap_root, one of
    its subordinate ids 1, mapped by newuidmap): runc run by a plain user cannot map two ids (it must chown
    its pipes to the container's root) nor bind-mount (it re-enters the host's mount namespace)."""
    if request.user.uid == 0:
        # Mapped into the namespace, host root keeps its power over root's files there: runc then makes
        # cgroups of its own in the host's hierarchies, and the container leaves the job's cgroup.
        raise ContainerError("a container as root is refused: root on the host stays root in its user "
                             "namespace and would leave the job's cgroup; submit the job as a user")
    argv = ["unshare", "--user", "--mount", "--map-user=0", "--map-group=0"]
    if not request.spec.remap_root:
        if request.subordinate_uid is None or request.subordinate_gid is None:
            raise ContainerError(f"uid {request.user.uid} has no subordinate ids (/etc/subuid, /etc/subgid), "
                                 "which a container needs to run as the user: ask the administrator to add "
                                 "them (usermod --add-subuids N-M --add-subgids N-M), or use "
                                 "--container-remap-root")
        argv += [f"--map-users={request.subordinate_uid},{OUTER_SUBORDINATE},1",
                 f"--map-groups={request.subordinate_gid},{OUTER_SUBORDINATE},1"]
    return argv + [runtime]
