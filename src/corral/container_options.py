"""pyxis's container options (`--container-image` and friends) as corral's jobs, steps and launches carry
them, and their grammars: read where they arrive (sbatch, srun, salloc, `#SBATCH`, the REST API) and
again on the node that runs the container (agent/container_runtime.py). Stdlib only.

A job or step holds them as flat fields named in FIELDS (each the option's name with `container_`); the
agent gets them as one `protocol.ContainerLaunch`. See decision 0020."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# field -> (its default, the option that sets it)
FIELDS: Mapping[str, tuple[Any, str]] = {
    "container_image": ("", "--container-image"),
    "container_mounts": ("", "--container-mounts"),
    "container_workdir": ("", "--container-workdir"),
    "container_name": ("", "--container-name"),
    "container_env": ("", "--container-env"),
    "container_mount_home": (True, "--no-container-mount-home"),
    "container_remap_root": (False, "--container-remap-root"),
}
# The node feature an agent reports when it can run containers (runc and uidmap installed): a job with an
# image is placed only on nodes that have it.
RUNTIME_FEATURE = "runc"
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


class ContainerOptionError(ValueError):
    """A container option that can never be honoured, with the option's name in the message."""


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


def parse_mounts(text: str) -> tuple[Mount, ...]:
    """pyxis's --container-mounts: SRC[:DST[:ro|rw]][,...]; DST defaults to SRC."""
    mounts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        parts = item.split(":")
        if len(parts) > 3 or not parts[0]:
            raise ContainerOptionError(f"--container-mounts: {item!r} is not SRC[:DST[:ro|rw]]")
        source, target = parts[0], parts[1] if len(parts) > 1 and parts[1] else parts[0]
        flag = parts[2] if len(parts) == 3 else "rw"
        if flag not in ("ro", "rw"):
            raise ContainerOptionError(f"--container-mounts: {item!r}: the flag must be ro or rw, not {flag!r}")
        if not source.startswith("/") or not target.startswith("/"):
            raise ContainerOptionError(f"--container-mounts: {item!r}: both paths must be absolute")
        mounts.append(Mount(source, target, flag == "ro"))
    return tuple(mounts)


def parse_env_names(text: str) -> tuple[str, ...]:
    """pyxis's --container-env: NAME[,NAME...], the job's variables that override the image's."""
    names = tuple(filter(None, (part.strip() for part in text.split(","))))
    for name in names:
        if not _VARIABLE.match(name):
            raise ContainerOptionError(f"--container-env: {name!r} is not a variable name")
    return names


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ContainerOptionError(f"--container-name {name!r}: use 1 to 64 letters, digits, - and _")
    return name


def check_workdir(path: str) -> str:
    if not path.startswith("/"):
        raise ContainerOptionError(f"--container-workdir {path!r}: give an absolute path inside the container")
    return path


def check_fields(values: Mapping[str, Any], step: bool = False) -> None:
    """The container fields of a job or step (FIELDS' names; missing ones at their defaults) can be
    honoured: every grammar holds, and the other options come with an image (a step's may come with a
    --container-name alone: the job's named container, or its job's image)."""
    image = values.get("container_image") or ""
    given = [option for field, (default, option) in FIELDS.items()
             if field != "container_image" and values.get(field, default) != default]
    if given and not image and not step:
        raise ContainerOptionError(f"{', '.join(given)} without --container-image: name the image to run in")
    parse_mounts(values.get("container_mounts") or "")
    parse_env_names(values.get("container_env") or "")
    if values.get("container_name"):
        check_name(values["container_name"])
    if values.get("container_workdir"):
        check_workdir(values["container_workdir"])


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The container fields `values` gives: a text that is not empty, a flag that is not None (a step's
    `False` replaces its job's `True`)."""
    return {field: values[field] for field, (default, _) in FIELDS.items()
            if field in values and values[field] is not None and (isinstance(default, bool) or values[field])}
