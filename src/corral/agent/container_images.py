"""A node's cache of container images: imported once per image and node, bounded in size, evicted LRU.

An image comes from a local file or a registry:
- a `docker-archive` tarball (`docker save`, `podman save`) or an OCI image layout tarball (`skopeo copy …
  oci-archive:`, `podman save --format oci-archive`): layers applied in order (`image_archives`);
- a squashfs file (`mksquashfs`, enroot) or a `.sif` (Apptainer): its file system unpacked by `unsquashfs`
  (`image_squashfs`);
- a registry reference (`docker://host/repo:tag`, pyxis's `host#repo:tag`, `repo:tag` from Docker Hub):
  pulled with skopeo for this node's architecture (`image_registry`).
A file's kind is read from its content, not its name.

The cache is a directory, one entry per image content (the SHA-256 of a file, the manifest digest of a
pulled image): `<cache>/<key>/rootfs` and `<key>/image.json` (its architecture, size, source and import
time). An entry is built under `<cache>/.partial-<key>-<pid>` and renamed into place, so a reader never sees
half an image; an exclusive lock per key (`<cache>/.locks/<key>`) makes two jobs that ask for the same image
at once import (or pull) it once: the second waits and finds it built. Each user of an image holds a lease
(`<key>/leases/<name>`); eviction (least recently used first, until the cache is under its limit) never
removes an image that is leased.

The agent imports as root, so an image is hostile input, whatever its source: a file, a hard link or a
whiteout that would reach outside the image's root (by `..` or through a symlink) refuses the whole image,
device files are not made, set-id bits are dropped.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import tarfile
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from corral.agent import image_registry
from corral.agent.image_archives import DirectoryBlobs, ImageError, unpack_image_tarball, unpack_layers
from corral.agent.image_squashfs import sif_partition, squashfs_kind, unpack_squashfs

_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
                  "s390x": "s390x"}


__all__ = ["CachedImage", "ImageCache", "ImageError", "ImageSource", "node_architecture"]


@dataclass(frozen=True)
class ImageSource:
    """Where an image comes from: a file of a kind read from its content, or a registry reference."""
    image: str  # as the user wrote it
    kind: str  # "tarball", "squashfs", "sif" or "registry"
    path: Path | None = None  # the file, for all kinds but "registry"
    reference: str = ""  # docker://…, for "registry"
    signature: tuple[int, ...] = ()  # the file's identity and change times when its key was taken


@dataclass(frozen=True)
class CachedImage:
    key: str
    rootfs: Path
    architecture: str
    size_bytes: int


def node_architecture() -> str:
    machine = platform.machine()
    return _ARCHITECTURES.get(machine, machine)


def file_signature(path: Path) -> tuple[int, ...]:
    """What changes whenever a file's content does: a write moves its ctime, which no user can set back."""
    info = path.stat()
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns


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


class ImageCache:
    def __init__(self, directory: Path, limit_bytes: int, architecture: str | None = None,
                 insecure_registries: frozenset[str] = frozenset()) -> None:
        self.directory = directory
        self.limit_bytes = limit_bytes
        self.architecture = architecture or node_architecture()
        self.insecure_registries = insecure_registries  # host[:port] pulled from over plain HTTP

    def acquire(self, image: str, lease: str, may_read: Callable[[str], bool] = lambda _: True) -> CachedImage:
        """The image, imported (or pulled) if this node has not got it yet, leased to `lease` until
        release(). `may_read`: whether the job's user may read a path (the agent reads the file as root)."""
        source, key = self._source(image, may_read)
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

    def leased(self, lease: str) -> CachedImage | None:
        """The image `lease` holds, or None: how a restarted agent finds what its adopted tasks run from
        (their launch names the image, but resolving it again could hash or pull; the lease says it)."""
        if not self.directory.is_dir():
            return None
        for entry in self.directory.iterdir():
            if not entry.name.startswith(".") and (entry / "leases" / lease).exists() \
                    and (entry / "image.json").exists():
                return self._read(entry.name)
        return None

    def release(self, key: str, lease: str) -> None:
        with self._locked(key):
            (self.directory / key / "leases" / lease).unlink(missing_ok=True)
        self.evict()

    def images(self) -> list[CachedImage]:
        if not self.directory.is_dir():  # nothing imported yet
            return []
        found = []
        for entry in self.directory.iterdir():
            if entry.name.startswith("."):
                continue
            try:
                found.append(self._read(entry.name))
            except FileNotFoundError:
                continue  # evicted meanwhile by another agent sharing the cache (`corral up`'s nodes)
        return found

    def evict(self) -> list[str]:
        """Remove unleased images, least recently used first, until the cache fits its limit. Several agents
        may share one cache (the nodes of a `corral up` cluster): an image another one evicted is skipped."""
        evicted = []
        last_use: dict[str, tuple[float, CachedImage]] = {}
        for image in self.images():
            try:
                last_use[image.key] = ((self.directory / image.key / "image.json").stat().st_mtime, image)
            except FileNotFoundError:
                continue
        by_last_use = [image for _, image in sorted(last_use.values(), key=lambda pair: pair[0])]
        total = sum(image.size_bytes for image in by_last_use)
        for image in by_last_use:
            if total <= self.limit_bytes:
                break
            with self._locked(image.key):
                entry = self.directory / image.key
                if not (entry / "image.json").exists():
                    total -= image.size_bytes  # another agent evicted it
                    continue
                if (entry / "leases").is_dir() and any((entry / "leases").iterdir()):
                    continue
                shutil.rmtree(entry)
            total -= image.size_bytes
            evicted.append(image.key)
        return evicted

    def _source(self, image: str, may_read: Callable[[str], bool]) -> tuple[ImageSource, str]:
        """What the image is and its cache key, checked before any lock is taken or anything imported."""
        if image_registry.is_registry_reference(image):
            reference, digest = image_registry.resolve(image, self.insecure_registries)
            return ImageSource(image, "registry", reference=reference), digest
        path = Path(image)
        if not path.is_file():
            raise ImageError(f"image {image} not found on this node: give the path of an image file (docker-"
                             "archive, OCI archive, squashfs or .sif) readable on every node of the job (a "
                             "shared filesystem), or a registry reference (docker://host/repo:tag)")
        if not may_read(str(path)):
            raise ImageError(f"image {image} is not readable by the job's user: make it readable (the node "
                             "imports it for you, not for whoever owns it)")
        with open(path, "rb") as file:
            head = file.read(64)
        kind = squashfs_kind(head) or ("tarball" if tarfile.is_tarfile(path) else None)
        if kind is None:
            raise ImageError(f"{image} is not an image corral can read: give a docker-archive or OCI archive "
                             "tarball, a squashfs file or a .sif")
        signature = file_signature(path)
        return ImageSource(image, kind, path=path, signature=signature), self._file_key(path, signature)

    def _file_key(self, path: Path, signature: tuple[int, ...]) -> str:
        """The SHA-256 of the file, remembered while the file is unchanged: hashing a multi-GB image at each
        job's start would cost seconds (about 0.6 s for 350 MB on the development host under load)."""
        memo = self.directory / ".sources" / hashlib.sha256(str(path.resolve()).encode()).hexdigest()
        try:
            record = json.loads(memo.read_text())
            if tuple(record["signature"]) == signature:
                return str(record["key"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # not hashed yet, or a memo from an older version: hash it
        key = _sha256(path)
        if file_signature(path) == signature:  # not written while it was hashed
            memo.parent.mkdir(parents=True, exist_ok=True)
            # a temporary name of its own: the agent hashes each job's image in a thread of its own, so two
            # jobs of one process may remember one file's key at once
            descriptor, partial = tempfile.mkstemp(prefix=f".{memo.name}-", dir=memo.parent)
            with os.fdopen(descriptor, "w") as file:
                file.write(json.dumps({"path": str(path), "signature": list(signature), "key": key}))
            os.rename(partial, memo)
        return key

    def _import(self, source: ImageSource, key: str) -> None:
        partial = self.directory / f".partial-{key}-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            started = time.monotonic()
            architecture = self._unpack(source, key, partial)
            if source.path is not None and file_signature(source.path) != source.signature:
                # what was unpacked may not be what was hashed: another job would get it under that key
                raise ImageError(f"image {source.image} was written to while the node imported it: refused; "
                                 "ask again once it is complete")
            record = {"architecture": architecture, "size_bytes": _tree_size(partial / "rootfs"),
                      "source": source.image, "kind": source.kind,
                      "import_s": round(time.monotonic() - started, 3)}
            (partial / "image.json").write_text(json.dumps(record))
            os.rename(partial, self.directory / key)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def _unpack(self, source: ImageSource, key: str, partial: Path) -> str:
        rootfs = partial / "rootfs"
        if source.kind == "registry":
            layout = partial / "pulled"
            image_registry.pull(source.image, source.reference, key, layout,
                                self.architecture, self.insecure_registries)
            architecture = unpack_layers(DirectoryBlobs(layout), source.image, rootfs, self.architecture)
            shutil.rmtree(layout)  # the unpacked root is what runs; the layers would double the disk used
            return architecture
        assert source.path is not None
        if source.kind == "squashfs":
            return unpack_squashfs(source.path, rootfs, self.architecture)
        if source.kind == "sif":
            offset, declared = sif_partition(source.path)
            return unpack_squashfs(source.path, rootfs, self.architecture, offset, declared)
        return unpack_image_tarball(source.path, rootfs, self.architecture)

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
