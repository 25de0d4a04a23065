"""sbatch options -> JobSubmit fields. The command line overrides the script's directives.

The options are sbatch's own (corral.slurm.sbatch.table: names, short forms, aliases and the field
each sets); `corral submit` takes the subset below, converted with corral's messages."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from corral import gpu_models
from corral.jobscript import values
from corral.jobscript.errors import DirectiveError
from corral.jobscript.getopt import Opt, ParsedOption, location, parse_args
from corral.slurm.sbatch import table
from corral.slurm.sbatch.values import split_requeue

SCRIPT_WHERE = " in #SBATCH directives"
COMMAND_LINE_WHERE = " on the command line"


@dataclass(frozen=True, slots=True)
class SubmitOption:
    option: Opt
    field: str  # the JobSubmit field it sets
    convert: Callable[[str], object]  # a None result unsets the field (--gres=none)
    group: str | None = None  # table.GROUPS: the command line's one replaces the script's others


# sbatch option key -> corral's converter; the order is the one `did you mean` ties follow.
_CONVERTERS: tuple[tuple[str, Callable[[str], object]], ...] = (
    ("nodes", values.positive_int),
    ("ntasks", values.positive_int),
    ("ntasks-per-node", values.positive_int),
    ("gpus", values.gpu_count),
    ("gpus-per-node", values.gpu_count),
    ("gres", values.gres_gpus),
    ("gpus-per-task", values.gpu_count),
    ("cpus-per-task", values.positive_int),
    ("mem", values.mem_mib),
    ("mem-per-gpu", values.mem_mib),
    ("mem-per-cpu", values.mem_mib),
    ("time", values.time_limit_s),
    ("partition", values.partition_name),
    ("job-name", values.text_value),
    ("output", values.text_value),
    ("error", values.text_value),
    ("chdir", values.text_value),
    ("priority", values.non_negative_int),
    ("account", values.single_name),
    ("qos", values.single_name),
    ("queue", values.single_name),  # corral's own (table.CORRAL_JOB)
    ("array", values.array_spec),
    ("dependency", values.dependency_spec),
    ("signal", values.signal_spec),
    ("reservation", values.single_name),
    ("nodelist", values.text_value),  # -w: exactly these nodes
    ("exclude", values.text_value),
    ("constraint", values.text_value),
    ("exclusive", values.whole_nodes),
    ("requeue", values.requeue_mode),  # --requeue[=expedite]
    ("no-requeue", values.flag_off),  # the last of --requeue/--no-requeue wins
    ("hold", values.flag_on),
    ("acctg-freq", values.acctg_task_s),
    # pyxis's: the job's container (decision 0020); their grammars are checked by JobSubmit
    ("container-image", values.text_value),
    ("container-mounts", values.text_value),
    ("container-workdir", values.text_value),
    ("container-name", values.text_value),
    ("container-env", values.text_value),
    ("container-mount-home", values.flag_on),
    ("no-container-mount-home", values.flag_off),
    ("container-remap-root", values.flag_on),
    ("no-container-remap-root", values.flag_off),
)


def _submit_option(key: str, convert: Callable[[str], object]) -> SubmitOption:
    if key in table.CORRAL_JOB:
        short, arg, field = table.CORRAL_JOB[key]
        return SubmitOption(Opt(key, short, arg), field, convert, table.GROUPS.get(field))
    field = table.JOB[key][2]
    return SubmitOption(table.BY_KEY[key], field, convert, table.GROUPS.get(field))


SUBMIT_OPTIONS: tuple[SubmitOption, ...] = tuple(_submit_option(*entry) for entry in _CONVERTERS)
SUBMIT_OPTION_TABLE: tuple[Opt, ...] = tuple(s.option for s in SUBMIT_OPTIONS)
# Every option of Slurm's sbatch: those SUBMIT_OPTIONS lacks are refused as unsupported, anything
# else as unrecognized (with a suggestion).
SBATCH_OPTIONS: tuple[Opt, ...] = table.OPTIONS
_BY_NAME = {s.option.key: s for s in SUBMIT_OPTIONS}


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
    return split_requeue(_split_gpu_models(out))


def _split_gpu_models(fields: dict) -> dict:
    """GPU counts written with a type (`a100:8`) set the count and JobSubmit.gpu_model; a share of
    one GPU (--gres=shard:N, mps:P) sets JobSubmit.gpu_share."""
    values.apply_gpu_share(fields)
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
    parsed = parse_args(tokens, SUBMIT_OPTION_TABLE, where=where, known=SBATCH_OPTIONS)
    extra = parsed.positionals[:1] or ([parsed.double_dash] if parsed.double_dash else [])
    if extra:
        raise DirectiveError(f"unexpected argument '{extra[0]}'{location(extra[0], where)}")
    settings: dict[str, _Setting] = {}
    for item in parsed.options:
        spec = _BY_NAME[item.option.key]
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
    given = [settings[f] for f in table.MEMORY_FIELDS if f in settings]
    if len(given) > 1:
        names = " and ".join(s.item.label for s in given)
        where_given = location(given[-1].item.token, where)
        raise DirectiveError(
            f"--mem, --mem-per-cpu and --mem-per-gpu are mutually exclusive (got {names}{where_given})"
        )
