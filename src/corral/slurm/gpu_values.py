"""GPU counts as sbatch's --gpus* and --gres take them: corral.jobscript.values' gpu_count and
gres_gpus, repeated here because that module declares GpuRequest with @dataclass, and importing
dataclasses (with inspect, ast, dis, tokenize) costs sbatch ~14 ms of a ~35 ms start on the
machines measured (bench/slurm_latency.py). test_gpu_values.py keeps the two in agreement; drop
this module once corral.jobscript.values no longer imports dataclasses."""
from __future__ import annotations

import re

from corral.jobscript.errors import DirectiveError
from corral.slurm.record import Record

_COUNT = re.compile(r"\d+")
_TYPED_COUNT = re.compile(r"(?:([A-Za-z0-9_.-]+):)?(\d+)")
_GRES_TYPE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")


class GpuRequest(Record):
    """A GPU count with an optional model (`--gpus a100:8`, `--gres=gpu:a100:2`)."""

    count: int
    model: str | None = None


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
