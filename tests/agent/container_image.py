"""A small image built here, offline: a static busybox as its root filesystem, saved as a docker-archive
tarball in two layers (the second deletes a file of the first with a whiteout), as `docker save` writes; and
the same files as an OCI archive, a squashfs (mksquashfs) and a SIF (written here after the SIF spec)."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import shutil
import struct
import subprocess
import tarfile
import uuid
from collections.abc import Sequence
from pathlib import Path

BUSYBOX = shutil.which("busybox")
APPLETS = ("sh", "id", "true", "cat", "ls", "echo", "touch", "env", "pwd", "test")


def _layer(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as layer:
        for info, data in members:
            layer.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = None, mode: int = 0o755,
           link: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    info.size = len(data) if data is not None else 0
    return info, data


def _busybox_layers() -> list[list[tuple[tarfile.TarInfo, bytes | None]]]:
    """Two layers: busybox and its applets, then a whiteout deleting a file of the first."""
    assert BUSYBOX, "busybox-static is needed to build the test image"
    busybox = Path(BUSYBOX).read_bytes()
    base = [entry(d, tarfile.DIRTYPE) for d in ("bin", "etc", "work", "gone")]
    # As in every distribution's image: runc gives the container's /tmp tmpfs the mode of the image's /tmp.
    base.append(entry("tmp", tarfile.DIRTYPE, mode=0o1777))
    base.append(entry("bin/busybox", data=busybox))
    base += [entry(f"bin/{applet}", tarfile.SYMTYPE, link="busybox") for applet in APPLETS]
    base.append(entry("etc/image-release", data=b"corral-test-image\n", mode=0o644))
    base.append(entry("gone/file", data=b"deleted by the next layer\n", mode=0o644))
    return [base, [entry("gone/.wh.file", data=b"", mode=0o644)]]


def build_image(path: Path, architecture: str = "amd64",
                extra_layers: Sequence[list[tuple[tarfile.TarInfo, bytes | None]]] = ()) -> Path:
    """The busybox image; `extra_layers` (lists of `entry(...)`) go on top of its two."""
    layers = [_layer(members) for members in (*_busybox_layers(), *extra_layers)]
    config = json.dumps({"architecture": architecture, "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [
                             "sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers]}}).encode()
    names = [f"{hashlib.sha256(layer).hexdigest()}/layer.tar" for layer in layers]
    manifest = json.dumps([{"Config": "config.json", "RepoTags": ["corral/test:latest"],
                            "Layers": names}]).encode()
    with tarfile.open(path, "w") as archive:
        for name, data in [("config.json", config), ("manifest.json", manifest), *zip(names, layers, strict=True)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def _blob(archive: tarfile.TarFile, data: bytes, corrupt: bool = False) -> dict:
    """Store data under its digest; `corrupt`: a byte added after the digest is taken."""
    digest = hashlib.sha256(data).hexdigest()
    if corrupt:
        data += b"\0"
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def build_oci_archive(path: Path, platforms: Sequence[str] = ("amd64",),
                      extra_layers: Sequence[list[tuple[tarfile.TarInfo, bytes | None]]] = (),
                      corrupt_layer: bool = False) -> Path:
    """The busybox image as an OCI image layout tarball (what `skopeo copy … oci-archive:` writes), its
    layers gzip-compressed; with several platforms, an index names one manifest per architecture.
    `corrupt_layer`: the first layer's blob does not match the digest its manifest gives."""
    layers = [_gzip(_layer(members)) for members in (*_busybox_layers(), *extra_layers)]
    with tarfile.open(path, "w") as archive:
        layer_refs = []
        for index, layer in enumerate(layers):
            stored = _blob(archive, layer, corrupt=corrupt_layer and index == 0)
            layer_refs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **stored})
        manifests = []
        for architecture in platforms:
            config = _blob(archive, json.dumps({"architecture": architecture, "os": "linux", "rootfs": {
                "type": "layers", "diff_ids": []}}).encode())
            manifest = _blob(archive, json.dumps({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
                "layers": layer_refs}).encode())
            manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest,
                              "platform": {"architecture": architecture, "os": "linux"}})
        for name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
                           ("index.json", json.dumps({"schemaVersion": 2, "manifests": manifests}).encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def build_rootfs(directory: Path, busybox: bool = True) -> Path:
    """The busybox image's files as a directory, for mksquashfs."""
    for name in ("bin", "etc", "tmp", "work"):
        (directory / name).mkdir(parents=True, exist_ok=True)
    if busybox:
        assert BUSYBOX, "busybox-static is needed to build the test image"
        shutil.copy(BUSYBOX, directory / "bin/busybox")
        for applet in APPLETS:
            (directory / "bin" / applet).symlink_to("busybox")
    (directory / "etc/image-release").write_text("corral-test-image\n")
    return directory


def build_squashfs(path: Path, rootfs: Path, pseudo: Sequence[str] = ()) -> Path:
    """mksquashfs (Debian's squashfs-tools) of rootfs, all files root's; `pseudo`: mksquashfs pseudo
    definitions (-p), which add device files without mknod."""
    subprocess.run(["mksquashfs", str(rootfs), str(path), "-noappend", "-quiet", "-no-progress", "-all-root",
                    *(arg for definition in pseudo for arg in ("-p", definition))], check=True,
                   stdout=subprocess.DEVNULL)
    return path


SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
SIF_DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")


def build_sif(path: Path, squashfs: Path, arch_code: bytes = b"02", primary: bool = True,
              fs_type: int = 1) -> Path:
    """A SIF file written here by following the sylabs/sif specification (no apptainer on Debian 12): a
    global header, a descriptor table of 48 entries at 4096 (a definition file, then the squashfs as the
    primary system partition), the data objects from 32768. `arch_code`: SIF's architecture code ("02"
    amd64, "04" arm64)."""
    deffile = b"Bootstrap: scratch\n"
    partition = squashfs.read_bytes()
    descriptors_at, data_at, total = 4096, 32768, 48
    deffile_at = data_at
    partition_at = data_at + 4096
    now = 1_700_000_000
    extra_partition = struct.pack("<ii3s", fs_type, 2 if primary else 3, arch_code + b"\0")
    descriptors = [
        SIF_DESCRIPTOR.pack(0x4001, True, 1, 0xF0000001, 0, deffile_at, len(deffile), 4096, now, now, 0, 0,
                            b"", b""),
        SIF_DESCRIPTOR.pack(0x4004, True, 2, 0xF0000001, 0, partition_at, len(partition), len(partition),
                            now, now, 0, 0, b"rootfs", extra_partition),
    ]
    table = b"".join(descriptors).ljust(total * SIF_DESCRIPTOR.size, b"\0")
    header = SIF_HEADER.pack(b"#!/usr/bin/env run-singularity\n", b"SIF_MAGIC\0", b"01\0", arch_code + b"\0",
                             uuid.uuid4().bytes, now, now, total - 2, total, descriptors_at,
                             len(descriptors) * SIF_DESCRIPTOR.size, data_at,
                             partition_at + len(partition) - data_at)
    with open(path, "wb") as file:
        file.write(header)
        file.seek(descriptors_at)
        file.write(table)
        file.seek(deffile_at)
        file.write(deffile)
        file.seek(partition_at)
        file.write(partition)
    return path
