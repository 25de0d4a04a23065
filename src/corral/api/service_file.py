"""A service's TOML file (`corral service apply -f svc.toml`, docs/services.md) read into a ServiceSpec.

The file's keys are the spec's fields (`[[ports]]`, `[probes.readiness.http]`, `[env]`, ...). A missing
`workdir` is the directory `corral service apply` runs in, as sbatch's; a relative one is taken from the
file's own directory, as a path written in a file is read relative to it (only the file's reader can tell).
Every problem is reported with its TOML key path:
`svc.toml: ports[1].port: 70000 is not a port (1-65535, or 0: any free port on the node)`."""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

from pydantic import ValidationError

from corral.api.services import ServiceSpec, problems


class ServiceFileError(ValueError):
    """What is wrong with a service file: one line per problem, each naming the file and the key."""

    def __init__(self, source: str, lines: list[str]) -> None:
        self.lines = [f"{source}: {line}" for line in lines]
        super().__init__("\n".join(self.lines))


def load_service_file(path: str | Path, cwd: Path | None = None) -> ServiceSpec:
    """`cwd`: the workdir when the file names none (default: this process's current directory)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServiceFileError(source, [f"cannot be read: {exc}"]) from None
    return parse_service(text, source, Path(path).resolve().parent, cwd or Path.cwd())


def parse_service(text: str, source: str, base_dir: Path, cwd: Path | None = None) -> ServiceSpec:
    """The spec a service file's text declares; `base_dir` is what a relative `workdir` is taken from,
    `cwd` the workdir when it names none (default: `base_dir`)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ServiceFileError(source, [f"not valid TOML: {exc}"]) from None
    workdir = data.get("workdir", "")
    if isinstance(workdir, str) and not workdir.startswith("/"):
        data["workdir"] = os.path.normpath(base_dir / workdir) if workdir else str((cwd or base_dir).absolute())
    try:
        return ServiceSpec.model_validate(data)
    except ValidationError as exc:
        raise ServiceFileError(source, problems(exc)) from None
