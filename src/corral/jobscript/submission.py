"""sbatch options -> JobSubmit fields. The command line overrides the script's directives."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from corral import gpu_models
from corral.jobscript import values
from corral.jobscript.errors import DirectiveError
from corral.jobscript.getopt import Option, ParsedOption, location, parse_args

SCRIPT_WHERE = " in #SBATCH directives"
COMMAND_LINE_WHERE = " on the command line"


@dataclass(frozen=True, slots=True)
class SubmitOption:
    option: Option
    field: str  # the JobSubmit field it sets
    convert: Callable[[str], object]  # a None result unsets the field (--gres=none)
    # Options stating one quantity in different ways. When the command line gives one of them, the
    # script's others are dropped: `--gpus 2` on the command line replaces `#SBATCH --gpus-per-node=4`
    # instead of contradicting it.
    group: str | None = None


def _opt(name: str, field: str, convert: Callable[[str], object], short: str | None = None,
         aliases: tuple[str, ...] = (), group: str | None = None) -> SubmitOption:
    return SubmitOption(Option(name, short, aliases), field, convert, group)


def _flag(name: str, field: str, convert: Callable[[str], object], short: str | None = None) -> SubmitOption:
    return SubmitOption(Option(name, short, takes_value=False), field, convert)


SUBMIT_OPTIONS: tuple[SubmitOption, ...] = (
    _opt("nodes", "nodes", values.positive_int, short="N"),
    _opt("ntasks", "ntasks", values.positive_int, short="n"),
    _opt("ntasks-per-node", "ntasks_per_node", values.positive_int, aliases=("tasks-per-node",)),
    _opt("gpus", "gpus", values.gpu_count, short="G", group="gpus"),
    _opt("gpus-per-node", "gpus_per_node", values.gpu_count, group="gpus"),
    _opt("gres", "gpus_per_node", values.gres_gpus, group="gpus"),
    _opt("gpus-per-task", "gpus_per_task", values.gpu_count),
    _opt("cpus-per-task", "cpus_per_task", values.positive_int, short="c"),
    _opt("mem", "mem_mib", values.mem_mib, group="mem"),
    _opt("mem-per-gpu", "mem_per_gpu_mib", values.mem_mib, group="mem"),
    _opt("mem-per-cpu", "mem_per_cpu_mib", values.mem_mib, group="mem"),
    _opt("time", "time_limit_s", values.time_limit_s, short="t"),
    _opt("partition", "partition", values.partition_name, short="p"),
    _opt("job-name", "name", values.text_value, short="J"),
    _opt("output", "output", values.text_value, short="o"),
    _opt("error", "error", values.text_value, short="e"),
    _opt("chdir", "workdir", values.text_value, short="D"),
    _opt("priority", "priority", values.non_negative_int),
    _opt("account", "account", values.single_name, short="A"),
    _opt("qos", "qos", values.single_name, short="q"),
    _opt("queue", "queue", values.single_name),  # corral's own: the quota queue
    _opt("array", "array", values.array_spec, short="a"),
    _opt("dependency", "dependency", values.dependency_spec, short="d"),
    _opt("signal", "signal", values.signal_spec),
    _opt("reservation", "reservation", values.single_name),
    _flag("requeue", "requeue", values.flag_on),
    _flag("no-requeue", "requeue", values.flag_off),  # the last of --requeue/--no-requeue wins
    _flag("hold", "hold", values.flag_on, short="H"),
)
SUBMIT_OPTION_TABLE: tuple[Option, ...] = tuple(s.option for s in SUBMIT_OPTIONS)
_BY_NAME = {s.option.name: s for s in SUBMIT_OPTIONS}
_MEMORY_FIELDS = ("mem_mib", "mem_per_cpu_mib", "mem_per_gpu_mib")


@cache
def slurm_sbatch_options() -> tuple[Option, ...]:
    """Every option of Slurm's sbatch (corral.slurm.sbatch.table): those SUBMIT_OPTIONS lacks are refused
    as unsupported, anything else as unrecognized (with a suggestion)."""
    from corral.slurm.sbatch.table import OPTIONS

    return tuple(Option(o.key, o.short, o.aliases) for o in OPTIONS)


@dataclass(frozen=True, slots=True)
class _Setting:
    value: object
    spec: SubmitOption
    item: ParsedOption


def build_submission(tokens_from_script: Sequence[str], tokens_from_command_line: Sequence[str]) -> dict:
    """JobSubmit fields from directive tokens and command-line tokens (which win).

    Only fields the options set are returned; the caller adds script/argv, workdir, env, user."""
    merged = _read_source(tokens_from_script, SCRIPT_WHERE)
    from_command_line = _read_source(tokens_from_command_line, COMMAND_LINE_WHERE)
    overridden_groups = {s.spec.group for s in from_command_line.values() if s.spec.group}
    merged = {f: s for f, s in merged.items() if s.spec.group not in overridden_groups}
    merged.update(from_command_line)
    out = {field: s.value for field, s in merged.items() if s.value is not None}
    return _split_gpu_models(out)


def _split_gpu_models(fields: dict) -> dict:
    """GPU counts written with a type (`a100:8`) set the count and JobSubmit.gpu_model."""
    written = []
    for name, value in list(fields.items()):
        if isinstance(value, values.GpuRequest):
            fields[name] = value.count
            if value.model:
                written.append(value.model)
    models = gpu_models.distinct(written)  # `h100` and `H100` are one type
    if len(models) > 1:
        raise DirectiveError(f"conflicting GPU types: {', '.join(sorted(models))}")
    if models:
        fields["gpu_model"] = models[0]
    return fields


def _read_source(tokens: Sequence[str], where: str) -> dict[str, _Setting]:
    parsed = parse_args(tokens, SUBMIT_OPTION_TABLE, where=where, known=slurm_sbatch_options())
    extra = parsed.positionals[:1] or ([parsed.double_dash] if parsed.double_dash else [])
    if extra:
        raise DirectiveError(f"unexpected argument '{extra[0]}'{location(extra[0], where)}")
    settings: dict[str, _Setting] = {}
    for item in parsed.options:
        spec = _BY_NAME[item.option.name]
        settings[spec.field] = _Setting(_convert(spec, item, where), spec, item)  # the last one wins
    _check_one_memory_option(settings, where)
    return settings


def _convert(spec: SubmitOption, item: ParsedOption, where: str) -> object:
    text = item.value or ""
    try:
        return spec.convert(text)
    except DirectiveError as exc:
        raise DirectiveError(
            f"invalid value {text!r} for {item.label}{location(item.token, where)}: {exc.reason}"
        ) from None


def _check_one_memory_option(settings: dict[str, _Setting], where: str) -> None:
    # As in sbatch: the per-node, per-CPU and per-GPU forms cannot be combined.
    given = [settings[f] for f in _MEMORY_FIELDS if f in settings]
    if len(given) > 1:
        names = " and ".join(s.item.label for s in given)
        where_given = location(given[-1].item.token, where)
        raise DirectiveError(
            f"--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive (got {names}{where_given})"
        )
