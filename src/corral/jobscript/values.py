"""Converters from option value text to JobSubmit field values; each raises DirectiveError with
what was expected (the caller adds the option name and where it was written)."""
from __future__ import annotations

from corral.jobscript.errors import DirectiveError
from corral.jobscript.units import parse_mem_mib, parse_time_s
from corral.limits import COUNT_MAX

# Hand-written matchers rather than `re`: sbatch converts GPU counts on every submission, and `re`
# (with enum) costs it ~7 ms of start-up. A count is `\d+` (str.isdecimal: Unicode digits too, as
# `re` matches them); names are ASCII.
_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_WORD = _LETTERS | frozenset("0123456789_")
_MODEL_CHARS = _WORD | frozenset(".-")  # --gpus and friends take `[type:]count` (JobSubmit.gpu_model)
_NAME_CHARS = _WORD | frozenset(".@+-")


class GpuRequest:
    """A GPU count with an optional model, as `--gpus a100:8` or `--gres=gpu:a100:2` state it.
    A plain class, not a dataclass: importing dataclasses costs sbatch ~15 ms of its start."""

    __slots__ = ("count", "model")

    def __init__(self, count: int, model: str | None = None) -> None:
        self.count, self.model = count, model

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuRequest) and (self.count, self.model) == (other.count, other.model)

    def __hash__(self) -> int:
        return hash((self.count, self.model))

    def __repr__(self) -> str:
        return f"GpuRequest(count={self.count!r}, model={self.model!r})"


ACCTG_TYPES = ("task", "energy", "network", "filesystem")
ACCTG_MAX_S = 86400


def acctg_task_s(value: str) -> int | None:
    """--acctg-freq's task sampling interval in seconds (Slurm's acct_gather_parse_freq): `task=N` among
    `<type>=N` items, or a bare N; None when it names no task interval; 0 turns sampling off.
    DirectiveError for anything else."""
    if value.isascii() and value.isdigit():
        found: int | None = int(value)
    else:
        found = None
        for item in value.split(","):
            kind, equals, number = item.partition("=")
            if not equals or kind not in ACCTG_TYPES or not (number.isascii() and number.isdigit()):
                raise DirectiveError(f"{item!r} is not <{'|'.join(ACCTG_TYPES)}>=<seconds>")
            if kind == "task":
                found = int(number)
    if found is not None and found > ACCTG_MAX_S:
        raise DirectiveError(f"the task interval is over {ACCTG_MAX_S} seconds")
    return found


def positive_int(text: str) -> int:
    value = _count(text, "a positive integer")
    if value < 1:
        raise DirectiveError("expected a positive integer")
    return value


def non_negative_int(text: str) -> int:
    return _count(text, "a non-negative integer")


def _count(text: str, expected: str) -> int:
    if not text.strip().isdecimal():
        raise DirectiveError(f"expected {expected}")
    return _bounded(int(text))


def _bounded(count: int) -> int:
    if count > COUNT_MAX:
        raise DirectiveError(f"{count} is more than corral's limit, {COUNT_MAX}")
    return count


def gpu_count(text: str) -> GpuRequest:
    model, colon, number = text.strip().rpartition(":")
    if not number.isdecimal() or (colon and not (model and _all_in(model, _MODEL_CHARS))):
        raise DirectiveError("expected a GPU count, optionally with a type: N or TYPE:N")
    return GpuRequest(_bounded(int(number)), model if colon else None)


def _all_in(text: str, allowed: frozenset[str]) -> bool:
    return all(char in allowed for char in text)


def _is_gres_type(text: str) -> bool:
    """`[A-Za-z_][A-Za-z0-9_.-]*`"""
    return bool(text) and (text[0] in _LETTERS or text[0] == "_") and _all_in(text, _MODEL_CHARS)


class GpuShare:
    """A share of one GPU per node, as `--gres=shard:[type:]N` (N of the GPU's shards) or
    `--gres=mps:[type:]P` (P percent of the GPU) state it: JobSubmit.gpu_share's text, which the
    controller turns into milli-GPUs (the shard count per GPU is the cluster's)."""

    __slots__ = ("kind", "amount", "model")

    def __init__(self, kind: str, amount: int, model: str | None = None) -> None:
        self.kind, self.amount, self.model = kind, amount, model

    @property
    def text(self) -> str:
        return f"{self.kind}:{self.amount}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GpuShare) and (self.kind, self.amount, self.model) == (
            other.kind, other.amount, other.model)

    def __hash__(self) -> int:
        return hash((self.kind, self.amount, self.model))

    def __repr__(self) -> str:
        return f"GpuShare(kind={self.kind!r}, amount={self.amount!r}, model={self.model!r})"


SHARE_KINDS = ("shard", "mps")
MPS_PERCENT_MAX = 100


def gres_gpus(text: str) -> GpuRequest | GpuShare | None:
    """GPUs per node from `--gres=gpu[:type][:N]` (N defaults to 1, as in Slurm), or a share of one GPU
    from `shard[:type][:N]` / `mps[:type][:N]`; "none" clears it. As in Slurm, a GPU is given whole
    (gpu) or in shares (shard, mps), not both, and each name once."""
    if text.strip().lower() == "none":
        return None
    items = [_gres_item(item.strip()) for item in text.split(",")]
    names = [("gpu" if isinstance(item, GpuRequest) else item.kind) for item in items]
    for name in names:
        if names.count(name) > 1:
            raise DirectiveError(f"give {name} only once")
    if len(items) > 1:
        raise DirectiveError(f"{' and '.join(names)} cannot be combined: a GPU is given whole (gpu) or in shares "
                             f"(shard, mps), by one kind of share")
    return items[0]


def apply_gpu_share(fields: dict) -> None:
    """A share written in --gres (fields["gpus_per_node"] a GpuShare) becomes JobSubmit's one GPU per
    node with `gpu_share`; whole GPUs asked for beside it (--gpus, --gpus-per-task) are refused, as
    Slurm refuses gres/gpu with gres/shard or gres/mps."""
    share = fields.get("gpus_per_node")
    if not isinstance(share, GpuShare):
        return
    whole = [name for name in ("gpus", "gpus_per_task") if fields.get(name) is not None]
    if whole:
        option = "--" + whole[0].replace("_", "-")
        raise DirectiveError(f"{option} and --gres={share.kind} cannot be combined: a GPU is given whole or in "
                             f"shares")
    fields["gpus_per_node"] = GpuRequest(1, share.model)
    fields["gpu_share"] = share.text


def _gres_item(item: str) -> GpuRequest | GpuShare:
    name, *rest = item.split(":")
    if name not in ("gpu", *SHARE_KINDS) or len(rest) > 2:
        raise DirectiveError(f"unsupported resource {item!r}: corral schedules gpu[:type][:N], "
                             f"shard[:type][:N] and mps[:type][:N]")
    count = _bounded(int(rest.pop())) if rest and rest[-1].isdecimal() else 1
    if len(rest) > 1 or (rest and not _is_gres_type(rest[0])):
        raise DirectiveError(f"invalid GPU type or count in {item!r}: expected {name}[:type][:N]")
    model = rest[0] if rest else None
    if name == "gpu":
        return GpuRequest(count, model)
    if count < 1:
        raise DirectiveError(f"{item!r} asks for no {name}: give a count of 1 or more")
    if name == "mps" and count > MPS_PERCENT_MAX:
        raise DirectiveError(f"{item!r}: mps counts are percent of one GPU, at most {MPS_PERCENT_MAX}")
    return GpuShare(name, count, model)


def text_value(text: str) -> str:
    if not text.strip():
        raise DirectiveError("expected a non-empty value")
    return text


def partition_name(text: str) -> str:
    name = text_value(text).strip()
    if "," in name:
        raise DirectiveError("corral takes one partition per job, not a list")
    return name


def time_limit_s(text: str) -> int:
    return parse_time_s(text)


def mem_mib(text: str) -> int:
    return parse_mem_mib(text)


def single_name(text: str) -> str:
    """One account, QOS, queue or reservation name: no lists, no blanks."""
    name = text_value(text).strip()
    if "," in name:
        raise DirectiveError("give one name, not a list")
    if not (name and _all_in(name, _NAME_CHARS)):
        raise DirectiveError("expected a name of letters, digits and _ . @ + -")
    return name


# The grammars of corral.jobscript.specs load on first use: every command line start reaches this module.
def array_spec(text: str) -> str:
    """The `--array` text, checked against Slurm's grammar and sent as written."""
    from corral.jobscript.specs import parse_array_spec

    parse_array_spec(text_value(text))
    return text.strip()


def dependency_spec(text: str) -> str:
    """The `--dependency` text, checked against Slurm's grammar and sent as written."""
    from corral.jobscript.specs import parse_dependency_spec

    parse_dependency_spec(text_value(text))
    return text.strip()


def signal_spec(text: str) -> str:
    """`--signal` in its canonical form `[B:]NAME@SECONDS`, the lead time filled in (Slurm's 60 s)."""
    from corral.jobscript.specs import parse_signal_spec

    return parse_signal_spec(text_value(text)).text()


def flag_on(_text: str) -> bool:
    return True


def whole_nodes(text: str) -> bool:
    """--exclusive: whole nodes for the job alone (Slurm's =user and =mcs sharing are not corral's)."""
    if text:
        raise DirectiveError("only --exclusive without a value is supported (whole nodes for the job alone)")
    return True


def requeue_mode(text: str) -> bool | str:
    """--requeue (True) or --requeue=expedite ("expedite", Slurm 25.11's expedited requeue)."""
    if not text:
        return True
    if text == "expedite":
        return text
    raise DirectiveError("the only value --requeue takes is 'expedite'")


def flag_off(_text: str) -> bool:
    return False
