"""GPU model names: the short Slurm-style type of a device name, and whether a requested model matches.

Agents report the device name as NVML gives it (`NVIDIA H100 80GB HBM3`); that stays the record. Users
write Slurm GRES types (`--gres=gpu:h100:2`, quota flavors `gpu:h100`). The rule, computed here only:

- The name is cut into parts at spaces, `-` and `_`, lower-cased; vendor and brand words (nvidia, tesla,
  geforce, quadro, amd, instinct, radeon, intel) are dropped.
- The *model number* is the first part holding a digit that is not a memory size (`80gb`). The series
  word `rtx` or `gtx` just before it joins it. That is the type: `h100`, `a100`, `v100`, `t4`, `a10g`,
  `l40s`, `gh200`, `rtx4090`, `rtxa6000`. A name without a model number (`sim-gpu`, `TITAN RTX`) has
  no type: it matches by its full name only and shows as plain `gpu:N`.
- A device answers to its full name, to Slurm's AutoDetect=nvml form of it (lower case, spaces made
  `_`: `nvidia_h100_80gb_hbm3`), to its type, to the type with the memory size the name states
  (`a100-80gb`, `v100-32gb`) and, for an RTX/GTX card, to the model number alone (`a6000`).
- Comparison ignores case and the separators ` `, `-` and `_`: `H100`, `A100_80GB` and `rtx_4090` match.

Alternatives are written `A|B`. Stdlib only and import-free: the Slurm commands use it.
"""
from __future__ import annotations

_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "radeon", "intel"})
_SERIES_WORDS = frozenset({"rtx", "gtx"})
_DIGITS = frozenset("0123456789")
_SEPARATORS = str.maketrans("", "", " -_")

_names_memo: dict[str, frozenset[str]] = {}
_MEMO_LIMIT = 4096


def key(term: str) -> str:
    """What two spellings of one name have in common: lower case, no ` `, `-` or `_`."""
    return term.lower().translate(_SEPARATORS)


def _parts(name: str) -> list[str]:
    parts = name.lower().replace("-", " ").replace("_", " ").split()
    return [p for p in parts if p not in _VENDOR_WORDS]


def _is_memory(part: str) -> bool:
    return part.endswith("gb") and len(part) > 2 and set(part[:-2]) <= _DIGITS


def _model_number(parts: list[str]) -> tuple[int, str] | None:
    for i, part in enumerate(parts):
        if not _DIGITS.isdisjoint(part) and not _is_memory(part):
            return i, part
    return None


def gpu_type(name: str) -> str:
    """The short Slurm-style type of a device name (`NVIDIA A100-SXM4-80GB` -> `a100`); "" if none."""
    parts = _parts(name)
    found = _model_number(parts)
    if found is None:
        return ""
    i, number = found
    return parts[i - 1] + number if i and parts[i - 1] in _SERIES_WORDS else number


def slurm_autodetect_name(name: str) -> str:
    """The type Slurm's AutoDetect=nvml gives a device (gpu_common_underscorify_tolower)."""
    return name.lower().replace(" ", "_")


def names(name: str) -> frozenset[str]:
    """Every key a device of this name answers to (see the module's rule)."""
    known = _names_memo.get(name)
    if known is not None:
        return known
    found = {key(name)}
    kind = gpu_type(name)
    if kind:
        parts = _parts(name)
        found.add(kind)
        model_number = _model_number(parts)
        assert model_number is not None  # gpu_type found one
        number = model_number[1]
        found.add(number)  # differs from the type only for an RTX/GTX card
        memory = next((p for p in parts if _is_memory(p)), None)
        if memory is not None:
            found.add(kind + memory)
    known = frozenset(found)
    if len(_names_memo) >= _MEMO_LIMIT:
        _names_memo.clear()
    _names_memo[name] = known
    return known


def matches(name: str, constraint: str) -> bool:
    """Does a device called `name` satisfy a model constraint ("" = any; `A|B` = either)?"""
    if not constraint or name == constraint:
        return True
    own = names(name)
    return any(key(term) in own for term in constraint.split("|") if term)


def same(a: str, b: str) -> bool:
    """Are two written models one (`H100` and `h100`, `a100_80gb` and `A100-80GB`)?"""
    return key(a) == key(b)


def distinct(terms) -> list[str]:
    """One spelling of each model among `terms` (the first written), in order."""
    seen: dict[str, str] = {}
    for term in terms:
        seen.setdefault(key(term), term)
    return list(seen.values())


def within_flavor(flavor: str, constraint: str) -> str | None:
    """The model constraint a job runs under when a queue's quota flavor `flavor` (a model as the
    tenancy names it) serves it: the flavor when every device of the flavor satisfies the job's
    constraint, the job's alternatives that lie within the flavor when they are narrower (`a100-80gb`
    under flavor `a100`), or None when the two share no device."""
    if matches(flavor, constraint):
        return flavor
    inside = [term for term in constraint.split("|") if term and key(flavor) in names(term)]
    return "|".join(inside) or None


def describe(name: str) -> str:
    """`h100 (NVIDIA H100 80GB HBM3)`; the bare name when it has no type."""
    kind = gpu_type(name)
    return f"{kind} ({name})" if kind and key(kind) != key(name) else name


def gres(name: str, count: int) -> str:
    """Slurm's GRES text of `count` devices of this name: `gpu:h100:8`, or `gpu:8` without a type."""
    kind = gpu_type(name)
    return f"gpu:{kind}:{count}" if kind else f"gpu:{count}"
