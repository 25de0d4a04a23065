"""A directory holding only this installation's Slurm commands (symlinks), to put first on the PATH of jobs
(the agent) and of salloc's shell: `srun` and `scontrol` there must be corral's even on a host where real
Slurm is installed, and nothing else of corral's environment (its python) may shadow the user's."""
from __future__ import annotations

import os
import sysconfig

SLURM_COMMANDS = ("sacct", "salloc", "sattach", "sbatch", "scancel", "scontrol", "sinfo", "sprio", "squeue", "srun",
                  "sstat")


def slurm_commands_dir(parent: str | os.PathLike) -> str:
    scripts = sysconfig.get_path("scripts")
    directory = os.path.join(os.fspath(parent), "bin")
    os.makedirs(directory, exist_ok=True)
    for name in SLURM_COMMANDS:
        target, link = os.path.join(scripts, name), os.path.join(directory, name)
        if os.path.exists(target) and os.path.realpath(link) != os.path.realpath(target):
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(target, link)
    return directory


def user_commands_dir() -> str:
    """The directory for the user running a command (salloc): under their cache directory."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    import zlib  # a stable name per installation (hash() of a str changes between runs)

    tag = zlib.crc32(sysconfig.get_path("scripts").encode())
    return slurm_commands_dir(os.path.join(cache, "corral", f"slurm-{tag:08x}"))


def first_on_path(directory: str, path: str) -> str:
    rest = [p for p in path.split(os.pathsep) if p and p != directory]
    return os.pathsep.join([directory, *rest])
