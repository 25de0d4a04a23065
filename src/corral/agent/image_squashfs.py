"""Single-filesystem images: a squashfs file (what enroot and `mksquashfs` make) or a SIF file
(Apptainer/Singularity's format: a header, a table of descriptors, and data objects, one of them the
primary system partition, a squashfs), unpacked with Debian's `unsquashfs` (squashfs-tools).

SIF, as the sylabs/sif specification lays it out (little-endian, fields packed without padding): a 128-byte
global header (launch script [32], magic "SIF_MAGIC\\0" [10], version [3], architecture [3], UUID [16], then
eight int64: created, modified, free descriptors, total descriptors, descriptors offset, descriptors size,
data offset, data size) and descriptors of 585 bytes (data type int32, used bool, id, group id, linked id
uint32, offset, size, size with padding, created, modified, uid, gid int64, name [128], extra [384]); a
partition's extra starts with its file system type int32, partition type int32 and architecture [3].

The agent unpacks as root, so the listing (`unsquashfs -lln`) is read first: a name with `..`, or one the
listing cannot show on one line, refuses the image; device files are left out; set-id bits and group and
other write bits are dropped, as for layered images; extended attributes (file capabilities) are not
restored. A squashfs does not say which architecture it was built for: its programs' ELF headers do.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import struct
import subprocess
import tempfile
from pathlib import Path

from corral.agent.image_archives import MOUNT_POINTS, ImageError

SQUASHFS_MAGIC = b"hsqs"
SIF_MAGIC = b"SIF_MAGIC\0"
SIF_MAGIC_AT = 32
SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")
SIF_DESCRIPTOR = struct.Struct("<i?IIIqqqqqqq128s384s")
SIF_PARTITION = struct.Struct("<ii3s")
SIF_DATA_PARTITION = 0x4004
SIF_FS_SQUASHFS = 1
SIF_PRIMARY_SYSTEM = 2
SIF_ARCHITECTURES = {b"01": "386", b"02": "amd64", b"03": "arm", b"04": "arm64", b"05": "ppc64",
                     b"06": "ppc64le", b"07": "mips", b"08": "mipsle", b"09": "mips64", b"10": "mips64le",
                     b"11": "s390x", b"12": "riscv64"}
ELF_MACHINES = {0x03: "386", 0x3E: "amd64", 0x28: "arm", 0xB7: "arm64", 0x15: "ppc64le", 0x16: "s390x",
                0xF3: "riscv64"}
PROGRAM_DIRECTORIES = ("bin", "usr/bin", "sbin", "usr/sbin", "usr/local/bin")
_LISTING = re.compile(r"^([-dlcbps])[-rwxsStT]{9} \d+/\d+ +(?:\d+|\d+, +\d+) \d{4}-\d\d-\d\d \d\d:\d\d "
                      r"squashfs-root(/.*)?$")
_SET_ID_AND_SHARED_WRITE = stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWGRP | stat.S_IWOTH


def squashfs_kind(head: bytes) -> str | None:
    """'squashfs' or 'sif' from a file's first bytes, or None."""
    if head.startswith(SQUASHFS_MAGIC):
        return "squashfs"
    if head[SIF_MAGIC_AT:SIF_MAGIC_AT + len(SIF_MAGIC)] == SIF_MAGIC:
        return "sif"
    return None


def sif_partition(source: Path) -> tuple[int, str]:
    """The offset of the SIF's primary system partition (a squashfs) and the architecture it names."""
    size = source.stat().st_size
    if size < SIF_HEADER.size:
        raise ImageError(f"{source}: a SIF header but only {size} bytes: the image is corrupt or truncated")
    with open(source, "rb") as file:
        header = SIF_HEADER.unpack(file.read(SIF_HEADER.size))
        total, table_at = header[8], header[9]
        if not 0 < total <= 4096 or table_at < SIF_HEADER.size or table_at + total * SIF_DESCRIPTOR.size > size:
            raise ImageError(f"{source}: its SIF descriptor table ({total} at {table_at}) is not inside the "
                             "file: the image is corrupt or truncated")
        file.seek(table_at)
        table = file.read(total * SIF_DESCRIPTOR.size)
    systems = []
    for index in range(total):
        fields = SIF_DESCRIPTOR.unpack_from(table, index * SIF_DESCRIPTOR.size)
        data_type, used, offset, length, extra = fields[0], fields[1], fields[5], fields[6], fields[13]
        if not used or data_type != SIF_DATA_PARTITION:
            continue
        fs_type, part_type, arch = SIF_PARTITION.unpack_from(extra)
        if part_type == SIF_PRIMARY_SYSTEM:
            systems.append((fs_type, offset, length, arch))
    if not systems:
        raise ImageError(f"{source} is a SIF file without a primary system partition: build it with "
                         "`apptainer build` (an image, not a data container)")
    fs_type, offset, length, arch = systems[0]
    if fs_type != SIF_FS_SQUASHFS:
        raise ImageError(f"{source}: its system partition is not a squashfs (file system type {fs_type}; an "
                         "encrypted or ext3 partition): rebuild it unencrypted with `apptainer build`")
    if offset < SIF_HEADER.size or offset + length > size:
        raise ImageError(f"{source}: its system partition ({length} bytes at {offset}) is not inside the file: "
                         "the image is corrupt or truncated")
    return offset, SIF_ARCHITECTURES.get(arch.rstrip(b"\0"), arch.rstrip(b"\0").decode("ascii", "replace"))


def _unsquashfs() -> str:
    found = shutil.which("unsquashfs")
    if not found:
        raise ImageError("this node cannot read squashfs or SIF images: install squashfs-tools (Debian: "
                         "apt-get install squashfs-tools), or pass a docker-archive or OCI tarball")
    return found


def _run(argv: list[str], source: Path) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
    if done.returncode != 0:
        raise ImageError(f"{source} is not a readable squashfs ({done.stderr.strip()[-300:]}): the image is "
                         "corrupt, or was made by a newer mksquashfs than this node's squashfs-tools reads")
    return done.stdout


def listed_devices(listing: str, source: Path) -> list[str]:
    """The device files the listing names (to leave out); refuse a name that leaves the root."""
    devices = []
    for line in listing.splitlines():
        found = _LISTING.match(line)
        if not found:
            raise ImageError(f"{source}: cannot read its listing line {line[:120]!r} (a name with a line "
                             "break or an unknown file type): refused")
        kind, path = found.group(1), found.group(2) or ""
        if kind == "l":
            path = path.split(" -> ", 1)[0]
        if ".." in path.split("/"):
            raise ImageError(f"the image's file {path!r} leaves the image: refused")
        if kind in ("c", "b"):
            devices.append(path.lstrip("/"))
    return devices


def _drop_set_id(rootfs: Path) -> None:
    for directory, dirnames, filenames in os.walk(rootfs):
        for name in dirnames + filenames:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if not stat.S_ISLNK(mode) and mode & _SET_ID_AND_SHARED_WRITE:
                os.chmod(path, stat.S_IMODE(mode) & ~_SET_ID_AND_SHARED_WRITE)


def elf_architecture(rootfs: Path) -> str | None:
    """The architecture of the first ELF program in the image's program directories (not following
    symlinks, which could point at the host's), or None when it has none."""
    for directory in PROGRAM_DIRECTORIES:
        folder = rootfs / directory
        if folder.is_symlink() or not folder.is_dir():
            continue
        for entry in sorted(os.scandir(folder), key=lambda found: found.name):
            if not entry.is_file(follow_symlinks=False):
                continue
            with open(entry.path, "rb") as file:
                head = file.read(20)
            if head[:4] == b"\x7fELF" and len(head) == 20:
                machine = struct.unpack("<H" if head[5] == 1 else ">H", head[18:20])[0]
                return ELF_MACHINES.get(machine, f"ELF machine {machine:#x}")
    return None


def unpack_squashfs(source: Path, rootfs: Path, architecture: str, offset: int = 0,
                    declared: str | None = None) -> str:
    """Unpack the squashfs at `offset` of source into rootfs (which must not exist); return its
    architecture: `declared` (a SIF names it) or that of its programs, which must be this node's."""
    if declared is not None and declared != architecture:
        raise ImageError(f"{source} is built for {declared}, this node is {architecture}: use an image "
                         f"built for {architecture}")
    unsquashfs = _unsquashfs()
    listing = _run([unsquashfs, "-lln", "-o", str(offset), "-d", "squashfs-root", str(source)], source)
    devices = listed_devices(listing, source)
    with tempfile.NamedTemporaryFile("w", prefix="corral-unsquashfs-", suffix=".exclude") as exclude:
        exclude.write("".join(f"{device}\n" for device in devices))
        exclude.flush()
        _run([unsquashfs, "-no-wildcards", "-no-xattrs", "-strict-errors", "-quiet", "-no-progress",
              "-o", str(offset), "-exclude-file", exclude.name, "-d", str(rootfs), str(source)], source)
    _drop_set_id(rootfs)
    found = declared or elf_architecture(rootfs)
    if found is None:
        raise ImageError(f"{source}: cannot tell which architecture it is built for (no ELF program in "
                         f"{', '.join('/' + d for d in PROGRAM_DIRECTORIES)}): use a docker-archive or OCI "
                         "image, which declare it")
    if found != architecture:
        raise ImageError(f"{source} is built for {found}, this node is {architecture}: use an image built "
                         f"for {architecture}")
    for mount_point in MOUNT_POINTS:
        (rootfs / mount_point).mkdir(exist_ok=True)
    return found
