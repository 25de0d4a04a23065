"""A small image built here, offline: a static busybox as its root filesystem, saved as a docker-archive
tarball in two layers (the second deletes a file of the first with a whiteout), as `docker save` writes."""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
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


def build_image(path: Path, architecture: str = "amd64",
                extra_layers: Sequence[list[tuple[tarfile.TarInfo, bytes | None]]] = ()) -> Path:
    """The busybox image; `extra_layers` (lists of `entry(...)`) go on top of its two."""
    assert BUSYBOX, "busybox-static is needed to build the test image"
    busybox = Path(BUSYBOX).read_bytes()
    base = [entry(d, tarfile.DIRTYPE) for d in ("bin", "etc", "work", "gone")]
    # As in every distribution's image: runc gives the container's /tmp tmpfs the mode of the image's /tmp.
    base.append(entry("tmp", tarfile.DIRTYPE, mode=0o1777))
    base.append(entry("bin/busybox", data=busybox))
    base += [entry(f"bin/{applet}", tarfile.SYMTYPE, link="busybox") for applet in APPLETS]
    base.append(entry("etc/image-release", data=b"corral-test-image\n", mode=0o644))
    base.append(entry("gone/file", data=b"deleted by the next layer\n", mode=0o644))
    top = [entry("gone/.wh.file", data=b"", mode=0o644)]
    layers = [_layer(base), _layer(top), *(_layer(extra) for extra in extra_layers)]
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
