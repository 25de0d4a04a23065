"""A node's cache of container images: imported once per image and node, bounded in size, evicted LRU.

An image arrives as a local `docker-archive` tarball (what `docker save` / `podman save` write; its
manifest.json names the config and the layers). No registry is reachable from these nodes, so a
`docker://` (or any registry) reference fails with an error that says to import the image as a file.

The cache is a directory, one entry per image content (the SHA-256 of the tarball):
`<cache>/<key>/rootfs` (the layers applied in order, whiteouts honoured) and `<key>/image.json` (its
architecture and size). An entry is built under `<cache>/.partial-<key>-<pid>` and renamed into place, so a
reader never sees half an image; an exclusive lock per key (`<cache>/.locks/<key>`) makes two jobs that ask
for the same image at once import it once: the second waits and finds it built. Each user of an image
holds a lease (`<key>/leases/<name>`); eviction (least recently used first, until the cache is under its
limit) never removes an image that is leased.

The agent imports as root, so an image is hostile input: a whiteout, a file or a hard link that would
reach outside the image's root (by `..` or through a symlink an earlier member made) refuses the whole
image, and device files are not made.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import tarfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REGISTRY_PREFIXES = ("docker://", "oci://", "nvcr.io#", "registry://")
MOUNT_POINTS = ("proc", "sys", "dev", "tmp")
WHITEOUT = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
                  "s390x": "s390x"}


class ImageError(Exception):
    """An image that cannot be used, with what to do about it."""


@dataclass(frozen=True)
class CachedImage:
    key: str
    rootfs: Path
    architecture: str
    size_bytes: int


def node_architecture() -> str:
    machine = platform.machine()
    return _ARCHITECTURES.get(machine, machine)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _tree_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _inside(rootfs: Path, relative: str, what: str) -> Path:
    """rootfs/relative, its directory resolved (symlinks a lower layer made included) and required to be
    in rootfs; its last part is not followed (a whiteout removes a symlink, not what it points to)."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ImageError(f"the image's {what} {relative!r} leaves the image: refused")
    real_root = os.path.realpath(rootfs)
    parent = os.path.realpath(os.path.join(real_root, *parts[:-1]))
    if os.path.commonpath([parent, real_root]) != real_root:
        raise ImageError(f"the image's {what} {relative!r} leaves the image (through a symlink): refused")
    return Path(parent) / parts[-1]


def _hard_link_target(rootfs: Path, linkname: str) -> None:
    """Refuse a hard link whose target, followed to the end (link() follows a symlink), leaves the image."""
    real_root = os.path.realpath(rootfs)
    target = os.path.realpath(_inside(rootfs, linkname, "hard link target"))
    if os.path.commonpath([target, real_root]) != real_root:
        raise ImageError(f"the image's hard link target {linkname!r} leaves the image: refused")


def _remove(target: Path) -> None:
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()


def _layer_members(rootfs: Path, layer: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Apply the layer's whiteouts (deletions of what lower layers put there: all before its other members,
    which they do not hide); return the members to extract, but device files (made by root here, they
    would open the host's devices to the container)."""
    keep = []
    for member in layer.getmembers():
        directory, _, name = member.name.rpartition("/")
        if name == OPAQUE_WHITEOUT:
            target = _inside(rootfs, f"{directory}/.", "whiteout") if directory else rootfs
            if target.is_dir() and not target.is_symlink():
                for child in target.iterdir():
                    _remove(child)
        elif name.startswith(WHITEOUT):
            _remove(_inside(rootfs, f"{directory}/{name[len(WHITEOUT):]}", "whiteout"))
        elif member.ischr() or member.isblk():
            continue
        else:
            keep.append(member)
    return keep


def _extract(rootfs: Path, layer: tarfile.TarFile, members: list[tarfile.TarInfo]) -> None:
    """One member at a time, so that a hard link is checked against what the layer made before it."""
    for member in members:
        if member.islnk():
            _hard_link_target(rootfs, member.linkname)
        # "tar" filter: nothing is written outside rootfs (symlinks followed); set-id bits dropped
        layer.extract(member, rootfs, set_attrs=True, filter="tar")
        if (member.isdir() or member.isreg()) and member.name.strip("./"):  # `./`: the root, left as made
            _restore_write_bits(rootfs, member)


def _restore_write_bits(rootfs: Path, member: tarfile.TarInfo) -> None:
    """The tar filter also drops group and other write bits and the sticky bit: put them back (never the
    set-id bits). An image's /tmp is 1777, and runc gives the container's /tmp tmpfs the mode of the image's
    /tmp: without this no user could write /tmp in any image."""
    target = _inside(rootfs, member.name, "file")
    if not target.is_symlink():
        os.chmod(target, member.mode & 0o1777)


def _read_manifest(archive: tarfile.TarFile, source: str) -> tuple[dict, list[str]]:
    try:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        entry = manifest[0]
        config = json.load(archive.extractfile(entry["Config"]))  # type: ignore[arg-type]
        return config, list(entry["Layers"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise ImageError(f"{source} is not a docker-archive image (no usable manifest.json: {exc}); "
                         "write one with `docker save` or `podman save --format docker-archive`") from exc


def unpack_docker_archive(source: Path, rootfs: Path, architecture: str) -> str:
    """Apply the archive's layers into rootfs (which must not exist); return the image's architecture.
    An image built for another architecture than `architecture` is refused before anything is unpacked."""
    with tarfile.open(source) as archive:
        config, layers = _read_manifest(archive, str(source))
        image_arch = str(config.get("architecture") or "")
        if image_arch != architecture:
            raise ImageError(f"{source} is built for {image_arch or 'an unnamed architecture'}, this node is "
                             f"{architecture}: use an image built for {architecture} (docker build "
                             f"--platform linux/{architecture})")
        rootfs.mkdir(parents=True)
        for name in layers:
            layer_file = archive.extractfile(name)
            if layer_file is None:
                raise ImageError(f"{source}: layer {name} is missing from the archive")
            with tarfile.open(fileobj=layer_file) as layer:
                _extract(rootfs, layer, _layer_members(rootfs, layer))
        for mount_point in MOUNT_POINTS:  # runc cannot make them in a read-only root
            (rootfs / mount_point).mkdir(exist_ok=True)
    return image_arch


class ImageCache:
    def __init__(self, directory: Path, limit_bytes: int, architecture: str | None = None) -> None:
        self.directory = directory
        self.limit_bytes = limit_bytes
        self.architecture = architecture or node_architecture()

    def acquire(self, image: str, lease: str, may_read: Callable[[str], bool] = lambda _: True) -> CachedImage:
        """The image, imported if this node has not got it yet, leased to `lease` until release().
        `may_read`: whether the job's user may read a path (the agent reads the file as root)."""
        source = self._local_source(image)
        if not may_read(str(source)):
            raise ImageError(f"image {image} is not readable by the job's user: make it readable (the node "
                             "imports it for you, not for whoever owns it)")
        key = _sha256(source)
        with self._locked(key):
            entry = self.directory / key
            if not (entry / "image.json").exists():
                self._import(source, key)
            (entry / "leases").mkdir(exist_ok=True)
            (entry / "leases" / lease).touch()
            os.utime(entry / "image.json")  # last use, for LRU eviction
            found = self._read(key)
        self.evict()
        return found

    def release(self, key: str, lease: str) -> None:
        with self._locked(key):
            (self.directory / key / "leases" / lease).unlink(missing_ok=True)
        self.evict()

    def images(self) -> list[CachedImage]:
        if not self.directory.is_dir():  # nothing imported yet
            return []
        return [self._read(entry.name) for entry in self.directory.iterdir()
                if not entry.name.startswith(".") and (entry / "image.json").exists()]

    def evict(self) -> list[str]:
        """Remove unleased images, least recently used first, until the cache fits its limit."""
        evicted = []
        by_last_use = sorted(self.images(), key=lambda image: (self.directory / image.key / "image.json")
                             .stat().st_mtime)
        total = sum(image.size_bytes for image in by_last_use)
        for image in by_last_use:
            if total <= self.limit_bytes:
                break
            with self._locked(image.key):
                if any((self.directory / image.key / "leases").iterdir()):
                    continue
                shutil.rmtree(self.directory / image.key)
            total -= image.size_bytes
            evicted.append(image.key)
        return evicted

    def _local_source(self, image: str) -> Path:
        if image.startswith(REGISTRY_PREFIXES) or (":" in image and not image.startswith(("/", "."))):
            raise ImageError(f"cannot pull {image}: this node reaches no image registry; save the image to a "
                             "file (docker save IMAGE -o image.tar) and pass its path to --container-image")
        source = Path(image)
        if not source.is_file():
            raise ImageError(f"image {image} not found on this node: give the path of a docker-archive "
                             "tarball readable on every node of the job (a shared filesystem)")
        return source

    def _import(self, source: Path, key: str) -> None:
        partial = self.directory / f".partial-{key}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        try:
            started = time.monotonic()
            architecture = unpack_docker_archive(source, partial / "rootfs", self.architecture)
            record = {"architecture": architecture, "size_bytes": _tree_size(partial / "rootfs"),
                      "source": str(source), "import_s": round(time.monotonic() - started, 3)}
            (partial / "image.json").write_text(json.dumps(record))
            os.rename(partial, self.directory / key)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def _read(self, key: str) -> CachedImage:
        record = json.loads((self.directory / key / "image.json").read_text())
        return CachedImage(key, self.directory / key / "rootfs", record["architecture"], record["size_bytes"])

    @contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        locks = self.directory / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with open(locks / key, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
