"""Whether every user of this host can run this installation's Slurm commands: a root `corral up` serves
all of them, but a corral installed where others cannot reach it (a virtual environment under /root, say)
leaves them with `bad interpreter: Permission denied` from `sbatch`.

A user runs a command through the interpreter its first line names, and Python then reads corral's
package: each directory on the way to either (the links' targets too) must be searchable by others (o+x),
the interpreter executable by them, the package's directory readable by them.
"""
from __future__ import annotations

import os
import stat
import sysconfig
from pathlib import Path

PROBE_COMMAND = "sbatch"  # every Slurm command has the same first line


def interpreter_of(script: Path) -> Path | None:
    """The interpreter a script's `#!` line names (None: no such line, or unreadable)."""
    try:
        with open(script, "rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    return Path(words[0]) if words else None


def closed_to_others(path: Path, final: int) -> str | None:
    """Why others cannot reach `path` and use it with the permission bits `final` (stat.S_IXOTH: run it,
    S_IROTH | S_IXOTH: list and enter it), or None. Follows links, checking their targets' way too."""
    seen: set[Path] = set()
    pending = [Path(os.path.abspath(path))]
    while pending:
        target = pending.pop()
        if target in seen:
            continue
        seen.add(target)
        for directory in reversed(target.parents):
            problem = _lacks(directory, stat.S_IXOTH, "searchable")
            if problem:
                return problem
        if target.is_symlink():
            pending.append(target.parent / os.readlink(target))
            continue
        problem = _lacks(target, final, "executable" if final == stat.S_IXOTH else "readable")
        if problem:
            return problem
    return None


def _lacks(path: Path, bits: int, what: str) -> str | None:
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if mode & bits != bits:
        return f"{path} is not {what} by other users (mode {stat.S_IMODE(mode):04o})"
    return None


def unreachable_install(scripts_dir: str | None = None, package_dir: str | None = None) -> str | None:
    """Why other users cannot run this installation's Slurm commands, naming the directory or file in
    the way; None when they can."""
    scripts = Path(scripts_dir or sysconfig.get_path("scripts"))
    interpreter = interpreter_of(scripts / PROBE_COMMAND)
    checks = [(scripts / PROBE_COMMAND, stat.S_IROTH | stat.S_IXOTH)]
    if interpreter is not None:
        checks.append((interpreter, stat.S_IXOTH))
    package = Path(package_dir or Path(__file__).resolve().parents[1])
    checks.append((package, stat.S_IROTH | stat.S_IXOTH))
    for path, bits in checks:
        problem = closed_to_others(path, bits)
        if problem:
            return problem
    return None


def install_warning(problem: str) -> str:
    """The banner's line for a root cluster whose commands other users cannot run."""
    return (f"other users cannot run the Slurm commands ({problem}): their sbatch fails with 'bad "
            "interpreter: Permission denied'. Install corral where every user can read it, e.g. a virtual "
            "environment under /opt (docs/adding-a-machine.md, section 1)")
