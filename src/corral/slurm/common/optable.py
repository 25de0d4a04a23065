"""What every command's option parser shares: glibc errors turned into Slurm's exits, and corral's
explicit table of the options it implements.

Each command lists all of Slurm's options (so that prefixes and ambiguities behave as in Slurm) and
says which ones corral does not implement: `ignored` ones are accepted with a warning on stderr
(Slurm itself treats them as hints, or they only tune Slurm internals); `unsupported` ones stop
the command with an error naming the option."""
from __future__ import annotations

from _collections_abc import Iterable, Mapping, Sequence

from corral.slurm.common.errors import SlurmCommandError
from corral.slurm.common.getopt import CommandLine, GetoptError, Opt, getopt_long
from corral.slurm.common.record import Record


class CommandSpec(Record):
    prog: str
    options: tuple[Opt, ...]
    getopt_exit: int = 1  # the exit status after a getopt error (sbatch: 255)
    try_help: bool = True  # sacct alone prints no "Try ... --help" line
    permute: bool = True  # sbatch stops at its script
    ignored: Mapping[str, str] = {}  # option key -> why corral ignores it
    unsupported: frozenset[str] = frozenset()

    def option_named(self, key: str) -> Opt:
        return next(o for o in self.options if o.key == key)


def parse_command_line(spec: CommandSpec, argv: Sequence[str]) -> CommandLine:
    try:
        return getopt_long(argv, spec.options, spec.prog, permute=spec.permute)
    except GetoptError as exc:
        hint = f'Try "{spec.prog} --help" for more information\n' if spec.try_help else ""
        raise SlurmCommandError(f"{exc}\n{hint}", spec.getopt_exit) from None


def option_label(spec: CommandSpec, key: str) -> str:
    option = spec.option_named(key)
    return f"--{option.longs[0]}" if option.longs else f"-{option.short}"


def check_support(spec: CommandSpec, line: CommandLine, keys: Iterable[str] | None = None) -> list[str]:
    """Warnings (stderr lines) for ignored options; SlurmCommandError for unsupported ones."""
    given = list(dict.fromkeys(keys if keys is not None else (k for k, _ in line.options)))
    for key in given:
        if key in spec.unsupported:
            raise SlurmCommandError(
                f"{spec.prog}: error: {option_label(spec, key)} is not supported by corral\n", 1)
    return [f"{spec.prog}: warning: {option_label(spec, key)} is ignored by corral: {spec.ignored[key]}\n"
            for key in given if key in spec.ignored]


def split_list(text: str | None) -> tuple[str, ...]:
    """Slurm's comma-separated lists (strtok: empty items vanish)."""
    return tuple(item for item in (text or "").split(",") if item)
