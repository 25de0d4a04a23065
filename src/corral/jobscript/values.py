"""Converters from option value text to JobSubmit field values; each raises DirectiveError with
what was expected (the caller adds the option name and where it was written)."""
from __future__ import annotations

import re

from corral.jobscript.errors import DirectiveError
from corral.jobscript.units import parse_mem_mib, parse_time_s

_COUNT = re.compile(r"\d+")
# --gpus and friends take `[type:]count`; the type is a GPU model constraint (JobSubmit.gpu_model).
_TYPED_COUNT = re.compile(r"(?:([A-Za-z0-9_.-]+):)?(\d+)")


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
_GRES_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_NAME = re.compile(r"[A-Za-z0-9_.@+-]+")


def positive_int(text: str) -> int:
    value = _count(text, "a positive integer")
    if value < 1:
        raise DirectiveError("expected a positive integer")
    return value


def non_negative_int(text: str) -> int:
    return _count(text, "a non-negative integer")


def _count(text: str, expected: str) -> int:
    if not _COUNT.fullmatch(text.strip()):
        raise DirectiveError(f"expected {expected}")
    return int(text)


def gpu_count(text: str) -> GpuRequest:
    match = _TYPED_COUNT.fullmatch(text.strip())
    if not match:
        raise DirectiveError("expected a GPU count, optionally with a type: N or TYPE:N")
    return GpuRequest(int(match.group(2)), match.group(1))


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
    count = int(rest.pop()) if rest and _COUNT.fullmatch(rest[-1]) else 1
    if len(rest) > 1 or (rest and not _GRES_TYPE.fullmatch(rest[0])):
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
    if not _NAME.fullmatch(name):
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
