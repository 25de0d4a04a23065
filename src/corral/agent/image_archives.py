"""Layered images: a `docker-archive` tarball (what `docker save` writes) or an OCI image layout (what
`skopeo copy … oci-archive:` and `podman save --format oci-archive` write as a tarball, and `skopeo copy …
oci:DIR` as a directory), unpacked into a root filesystem by applying their layers in order.

The agent unpacks as root, so an image is hostile input: a whiteout, a file or a hard link that would
reach outside the image's root (by `..` or through a symlink an earlier member made) refuses the whole
image, device files are not made, set-id bits are dropped. Blobs of an OCI layout are checked against
their digests, so a layout cannot say one thing and unpack another.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator, Protocol

WHITEOUT = ".wh."
OPAQUE_WHITEOUT = ".wh..wh..opq"
MOUNT_POINTS = ("proc", "sys", "dev", "tmp")
OCI_INDEX_TYPES = ("application/vnd.oci.image.index.v1+json",
                   "application/vnd.docker.distribution.manifest.list.v2+json")


class ImageError(Exception):
    """An image that cannot be used, with what to do about it."""


class Blobs(Protocol):
    """The named files of an image: members of a tarball or files of a directory."""

    def has(self, name: str) -> bool: ...

    def open(self, name: str) -> IO[bytes]: ...


class TarBlobs:
    def __init__(self, archive: tarfile.TarFile, source: str) -> None:
        self.archive, self.source = archive, source
        self.names = {name.removeprefix("./") for name in archive.getnames()}

    def has(self, name: str) -> bool:
        return name in self.names

    def open(self, name: str) -> IO[bytes]:
        for candidate in (name, f"./{name}"):
            try:
                found = self.archive.extractfile(candidate)
            except KeyError:
                continue
            if found is not None:
                return found
        raise ImageError(f"{self.source}: {name} is missing from the image (a broken or truncated file): "
                         "save the image again")


class DirectoryBlobs:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def has(self, name: str) -> bool:
        return (self.directory / name).is_file()

    def open(self, name: str) -> IO[bytes]:
        if ".." in name.split("/") or not self.has(name):
            raise ImageError(f"{self.directory}: {name} is missing from the image layout")
        return open(self.directory / name, "rb")


@dataclass(frozen=True)
class Layer:
    name: str  # the blob holding the layer's tarball
    digest: str = ""  # "sha256:…" where the format names it (OCI), checked before the layer is used


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


def _json(blobs: Blobs, name: str, source: str, digest: str = "") -> dict:
    with blobs.open(name) as file:
        data = file.read()
    if digest and f"sha256:{hashlib.sha256(data).hexdigest()}" != digest:
        raise ImageError(f"{source}: {name} does not match its digest {digest}: the image is corrupt")
    try:
        found = json.loads(data)
    except ValueError as exc:
        raise ImageError(f"{source}: {name} is not JSON ({exc}): the image is corrupt") from exc
    if not isinstance(found, dict) and not (name == "manifest.json" and isinstance(found, list)):
        raise ImageError(f"{source}: {name} is not a JSON object: the image is corrupt")
    return found if isinstance(found, dict) else {"entries": found}


def _blob_name(digest: object, source: str) -> str:
    algorithm, _, encoded = str(digest).partition(":")
    if algorithm != "sha256" or len(encoded) != 64 or not all(c in "0123456789abcdef" for c in encoded):
        raise ImageError(f"{source}: digest {digest!r} is not a sha256 digest: the image is corrupt "
                         "or uses a digest corral does not read")
    return f"blobs/sha256/{encoded}"


def _docker_manifest(blobs: Blobs, source: str) -> tuple[dict, list[Layer]]:
    try:
        entry = _json(blobs, "manifest.json", source)["entries"][0]
        config = _json(blobs, entry["Config"], source)
        return config, [Layer(str(name)) for name in entry["Layers"]]
    except (KeyError, IndexError, TypeError) as exc:
        raise ImageError(f"{source} is not a docker-archive image (no usable manifest.json: {exc}); "
                         "write one with `docker save` or `podman save --format docker-archive`") from exc


def _pick_platform(blobs: Blobs, source: str, manifests: list, architecture: str) -> dict:
    """The one manifest of an index for this node: the only one, or the one whose platform matches."""
    if len(manifests) == 1 and manifests[0].get("mediaType") not in OCI_INDEX_TYPES:
        return manifests[0]
    offered = []
    for candidate in manifests:
        if candidate.get("mediaType") in OCI_INDEX_TYPES:
            nested = _json(blobs, _blob_name(candidate.get("digest"), source), source, candidate["digest"])
            return _pick_platform(blobs, source, list(nested.get("manifests") or []), architecture)
        platform = candidate.get("platform") or {}
        offered.append(str(platform.get("architecture")))
        if platform.get("architecture") == architecture and platform.get("os", "linux") == "linux":
            return candidate
    raise ImageError(f"{source} holds no image for {architecture} (it has: {', '.join(offered) or 'none'}): "
                     f"use an image built for {architecture} (docker build --platform linux/{architecture})")


def _oci_manifest(blobs: Blobs, source: str, architecture: str) -> tuple[dict, list[Layer]]:
    try:
        index = _json(blobs, "index.json", source)
        chosen = _pick_platform(blobs, source, list(index["manifests"]), architecture)
        manifest = _json(blobs, _blob_name(chosen["digest"], source), source, chosen["digest"])
        config_digest = manifest["config"]["digest"]
        config = _json(blobs, _blob_name(config_digest, source), source, config_digest)
        layers = [Layer(_blob_name(layer["digest"], source), layer["digest"]) for layer in manifest["layers"]]
    except (KeyError, IndexError, TypeError) as exc:
        raise ImageError(f"{source} is not a usable OCI image layout ({exc!r} missing from its index, manifest "
                         "or config): write one with `skopeo copy … oci-archive:FILE`") from exc
    return config, layers


def _digest_mismatch(layer: Layer, found: str, source: str) -> None:
    if layer.digest and f"sha256:{found}" != layer.digest:
        raise ImageError(f"{source}: layer {layer.digest} does not match its digest: the image is corrupt")


def gunzip_layer(file: IO[bytes], plain: IO[bytes], layer: Layer, source: str) -> str:
    """Inflate a gzip layer (of one or more members) into `plain`, in one pass that also hashes it: a gzip
    stream cannot seek, and tarfile reading it in place inflated it twice or more (getmembers, then each
    extract), 3-4x slower for a 350 MB image."""
    digest = hashlib.sha256()
    inflate = zlib.decompressobj(wbits=31)
    while chunk := file.read(1 << 20):
        digest.update(chunk)
        while chunk:
            if inflate.eof:  # the next member of a multi-member gzip, or zero padding (gzip skips it)
                chunk = chunk.lstrip(b"\0")
                if not chunk:
                    break
                inflate = zlib.decompressobj(wbits=31)
            try:
                plain.write(inflate.decompress(chunk))
            except zlib.error as exc:
                raise ImageError(f"{source}: layer {layer.digest or layer.name} is not valid gzip ({exc}): "
                                 "the image is corrupt") from exc
            chunk = inflate.unused_data if inflate.eof else b""
    if not inflate.eof:
        raise ImageError(f"{source}: layer {layer.digest or layer.name} ends before its gzip stream does: "
                         "the image is corrupt or truncated")
    plain.seek(0)
    return digest.hexdigest()


@contextmanager
def _layer_tar(blobs: Blobs, layer: Layer, source: str, scratch: Path) -> Iterator[tarfile.TarFile]:
    """The layer as a tarball, its digest checked first; a gzip layer is inflated into a scratch file."""
    with blobs.open(layer.name) as file, tempfile.TemporaryFile(dir=scratch) as plain:
        head = file.read(4)
        file.seek(0)
        if head == b"\x28\xb5\x2f\xfd":
            raise ImageError(f"{source}: layer {layer.digest or layer.name} is compressed with zstd, which "
                             "corral cannot read: recompress it (skopeo copy --dest-compress-format gzip …)")
        if head[:2] == b"\x1f\x8b":
            _digest_mismatch(layer, gunzip_layer(file, plain, layer, source), source)
            readable: IO[bytes] = plain
        else:
            digest = hashlib.sha256()
            while chunk := file.read(1 << 20):
                digest.update(chunk)
            _digest_mismatch(layer, digest.hexdigest(), source)
            file.seek(0)
            readable = file
        try:
            with tarfile.open(fileobj=readable, mode="r:*") as layer_tar:
                yield layer_tar
        except tarfile.ReadError as exc:
            raise ImageError(f"{source}: layer {layer.digest or layer.name} is not a tarball ({exc}): "
                             "the image is corrupt") from exc


def image_layers(blobs: Blobs, source: str, architecture: str) -> tuple[str, list[Layer]]:
    """The image's architecture and its layers, bottom first; another architecture is refused here,
    before anything is unpacked."""
    if blobs.has("oci-layout") and blobs.has("index.json"):
        config, layers = _oci_manifest(blobs, source, architecture)
    elif blobs.has("manifest.json"):
        config, layers = _docker_manifest(blobs, source)
    else:
        raise ImageError(f"{source} is a tarball but not an image (no manifest.json nor oci-layout): write "
                         "one with `docker save`, `podman save` or `skopeo copy … oci-archive:FILE`")
    image_arch = str(config.get("architecture") or "")
    if image_arch != architecture:
        raise ImageError(f"{source} is built for {image_arch or 'an unnamed architecture'}, this node is "
                         f"{architecture}: use an image built for {architecture} (docker build "
                         f"--platform linux/{architecture})")
    return image_arch, layers


def unpack_layers(blobs: Blobs, source: str, rootfs: Path, architecture: str) -> str:
    """Apply the image's layers into rootfs (which must not exist); return the image's architecture."""
    image_arch, layers = image_layers(blobs, source, architecture)
    rootfs.mkdir(parents=True)
    for layer in layers:
        with _layer_tar(blobs, layer, source, rootfs.parent) as layer_tar:
            _extract(rootfs, layer_tar, _layer_members(rootfs, layer_tar))
    for mount_point in MOUNT_POINTS:  # runc cannot make them in a read-only root
        (rootfs / mount_point).mkdir(exist_ok=True)
    return image_arch


def unpack_image_tarball(source: Path, rootfs: Path, architecture: str) -> str:
    """A docker-archive or OCI-archive tarball, unpacked into rootfs."""
    with tarfile.open(source) as archive:
        return unpack_layers(TarBlobs(archive, str(source)), str(source), rootfs, architecture)

