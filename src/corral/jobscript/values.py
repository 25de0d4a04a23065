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


def gres_gpus(text: str) -> GpuRequest | None:
    """GPUs per node from `--gres=gpu[:type][:N]` (N defaults to 1, as in Slurm); "none" clears it."""
    if text.strip().lower() == "none":
        return None
    counts = [_gres_item_gpus(item.strip()) for item in text.split(",")]
    if len(counts) != 1:
        raise DirectiveError("give gpu only once")
    return counts[0]


def _gres_item_gpus(item: str) -> GpuRequest:
    name, *rest = item.split(":")
    if name != "gpu" or len(rest) > 2:
        raise DirectiveError(f"unsupported resource {item!r}: corral schedules only gpu[:type][:N]")
    count = _bounded(int(rest.pop())) if rest and rest[-1].isdecimal() else 1
    if len(rest) > 1 or (rest and not _is_gres_type(rest[0])):
        raise DirectiveError(f"invalid GPU type or count in {item!r}: expected gpu[:type][:N]")
    return GpuRequest(count, rest[0] if rest else None)


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


def flag_off(_text: str) -> bool:
    return False
