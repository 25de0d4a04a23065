"""Slurm's grammars for `--array`, `--dependency` and `--signal`, parsed into small structures.

Stdlib only, so the controller can read the same texts the command line checked. Each parser raises
DirectiveError whose `reason` says what was expected; the caller names the option and the value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from corral.jobref import JobIdError, parse_job_ref
from corral.jobscript.errors import DirectiveError
from corral.jobscript.units import parse_time_s
from corral.limits import ARRAY_INDEX_MAX

# ---------------------------------------------------------------------------------------- --array

ARRAY_FORMS_HELP = "indexes N, N-M or N-M:STEP, comma-separated, then optionally %MAX (e.g. 0-99%8, 1,3,5, 0-15:4)"
_ARRAY_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True, slots=True)
class IndexRange:
    first: int
    last: int
    step: int = 1

    @property
    def count(self) -> int:
        return (self.last - self.first) // self.step + 1


@dataclass(frozen=True, slots=True)
class ArraySpec:
    ranges: tuple[IndexRange, ...]
    throttle: int | None  # at most this many tasks run at once (`%N`)

    def indices(self) -> list[int]:
        """The task indices, ascending, each once."""
        found = {i for r in self.ranges for i in range(r.first, r.last + 1, r.step)}
        return sorted(found)


def parse_array_spec(text: str) -> ArraySpec:
    """`0-99%8`, `1,3,5`, `0-15:4`, `1-5,10%2`: index ranges and an optional throttle."""
    indexes, has_throttle, throttle_text = text.strip().partition("%")
    throttle = _array_throttle(throttle_text) if has_throttle else None
    if not indexes:
        raise _array_error("no indexes before '%'" if has_throttle else "empty")
    ranges = tuple(_array_range(item) for item in indexes.split(","))
    return ArraySpec(ranges, throttle)


def _array_throttle(text: str) -> int:
    if not _DIGITS.fullmatch(text) or int(text) < 1:
        raise _array_error(f"the task limit after '%' must be a positive integer, not {text!r}")
    return int(text)


def _array_range(item: str) -> IndexRange:
    match = _ARRAY_ITEM.fullmatch(item)
    if not match:
        raise _array_error(f"bad item {item!r}")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    step = int(match.group(3)) if match.group(3) is not None else 1
    if last < first:
        raise _array_error(f"range {item!r} ends before it starts")
    if step < 1:
        raise _array_error(f"the step in {item!r} must be at least 1")
    if last > ARRAY_INDEX_MAX:
        raise _array_error(f"index {last} is above the largest allowed, {ARRAY_INDEX_MAX}")
    return IndexRange(first, last, step)


def _array_error(problem: str) -> DirectiveError:
    reason = f"{problem}; expected {ARRAY_FORMS_HELP}"
    return DirectiveError(f"invalid array spec: {reason}", reason)


# ----------------------------------------------------------------------------------- --dependency

DEPENDENCY_TYPES = ("after", "afterany", "afterok", "afternotok")
SINGLETON = "singleton"
DEPENDENCY_FORMS_HELP = ("TYPE:ID[:ID...] with TYPE after, afterany, afterok or afternotok, ID a job id N or an "
                         "array task N_M, each ID optionally +MINUTES; several joined by ',' (all) or '?' (any); "
                         "or singleton")


@dataclass(frozen=True, slots=True)
class JobRef:
    job_id: int
    array_task_id: int | None = None
    delay_s: int = 0  # `+minutes`: how long after the event the dependency is satisfied


@dataclass(frozen=True, slots=True)
class DependencyTerm:
    kind: str  # one of DEPENDENCY_TYPES, or "singleton"
    jobs: tuple[JobRef, ...] = ()


@dataclass(frozen=True, slots=True)
class DependencySpec:
    terms: tuple[DependencyTerm, ...]
    any_of: bool  # joined by `?`: one satisfied term is enough; by `,`: all must be


def parse_dependency_spec(text: str) -> DependencySpec:
    """`afterok:1:2,afterany:3`, `afterok:1?afternotok:2`, `after:5+10`, `afterok:7_3`, `singleton`."""
    cleaned = text.strip()
    if "," in cleaned and "?" in cleaned:
        raise _dependency_error("use either ',' (all) or '?' (any) between dependencies, not both")
    any_of = "?" in cleaned
    terms = tuple(_dependency_term(item) for item in cleaned.split("?" if any_of else ","))
    return DependencySpec(terms, any_of)


def _dependency_term(item: str) -> DependencyTerm:
    if item == SINGLETON:
        return DependencyTerm(SINGLETON)
    kind, has_ids, ids = item.partition(":")
    if kind not in DEPENDENCY_TYPES:
        raise _dependency_error(f"unknown dependency {kind!r}" if kind else "empty dependency")
    if not has_ids or not ids:
        raise _dependency_error(f"{kind!r} needs at least one job id")
    return DependencyTerm(kind, tuple(_job_ref(ref) for ref in ids.split(":")))


def _job_ref(text: str) -> JobRef:
    ref_text, plus, delay = text.partition("+")
    try:
        ref = parse_job_ref(ref_text)
    except JobIdError as exc:
        raise _dependency_error(f"bad job id {text!r}: {str(exc).partition(': ')[2] or exc}") from None
    if plus and not delay:
        raise _dependency_error(f"bad job id {text!r}: nothing after '+'")
    task = ref.tasks[0][0] if ref.tasks else None
    return JobRef(ref.job_id, task, _delay_s(delay) if plus else 0)


def _delay_s(text: str) -> int:
    try:
        return parse_time_s(text)
    except DirectiveError as exc:
        raise _dependency_error(f"bad time '+{text}': {exc.reason}") from None


def _dependency_error(problem: str) -> DirectiveError:
    reason = f"{problem}; expected {DEPENDENCY_FORMS_HELP}"
    return DirectiveError(f"invalid dependency: {reason}", reason)


# --------------------------------------------------------------------------------------- --signal

DEFAULT_SIGNAL_LEAD_S = 60  # Slurm's default when `@time` is left out
MAX_SIGNAL_LEAD_S = 0xFFFF  # as sbatch
MAX_SIGNAL_NUMBER = 64  # SIGRTMAX on Linux
# The names Slurm knows (sig_name2num), with their Linux numbers: jobs run on Linux nodes whatever
# the submitting machine is.
SIGNAL_NUMBERS = {
    "HUP": 1, "INT": 2, "QUIT": 3, "ABRT": 6, "KILL": 9, "USR1": 10, "USR2": 12, "ALRM": 14, "TERM": 15,
    "CONT": 18, "STOP": 19, "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24,
}
SIGNAL_FORMS_HELP = "[B:]SIG[@SECONDS] with SIG a name (USR1, SIGUSR1, TERM, ...) or a number"


@dataclass(frozen=True, slots=True)
class SignalSpec:
    number: int
    name: str  # as to be written back: `USR1`, or the number as text when given as one
    lead_s: int  # sent this long before the time limit
    batch_only: bool  # `B:`: only the batch shell gets it, not every task

    def text(self) -> str:
        """The canonical form: `[B:]NAME@SECONDS`."""
        return f"{'B:' if self.batch_only else ''}{self.name}@{self.lead_s}"


def parse_signal_spec(text: str) -> SignalSpec:
    """`USR1`, `SIGUSR1@90`, `B:TERM@120`, `10@30`; the lead time defaults to 60 s, as in Slurm."""
    cleaned = text.strip()
    flags, has_flags, rest = cleaned.rpartition(":")
    if has_flags and flags != "B":
        raise _signal_error(f"unsupported flag {flags!r} (only B: is known)")
    signal_text, has_lead, lead_text = rest.partition("@")
    number, name = _signal_number(signal_text)
    lead_s = _signal_lead_s(lead_text) if has_lead else DEFAULT_SIGNAL_LEAD_S
    return SignalSpec(number, name, lead_s, batch_only=bool(has_flags))


def _signal_number(text: str) -> tuple[int, str]:
    if _DIGITS.fullmatch(text):
        if not 1 <= int(text) <= MAX_SIGNAL_NUMBER:
            raise _signal_error(f"signal number {text} is not between 1 and {MAX_SIGNAL_NUMBER}")
        return int(text), str(int(text))
    name = text.upper().removeprefix("SIG")
    if name not in SIGNAL_NUMBERS:
        raise _signal_error(f"unknown signal {text!r}")
    return SIGNAL_NUMBERS[name], name


def _signal_lead_s(text: str) -> int:
    if not _DIGITS.fullmatch(text) or int(text) > MAX_SIGNAL_LEAD_S:
        raise _signal_error(f"the time after '@' must be whole seconds from 0 to {MAX_SIGNAL_LEAD_S}, not {text!r}")
    return int(text)


def _signal_error(problem: str) -> DirectiveError:
    reason = f"{problem}; expected {SIGNAL_FORMS_HELP}"
    return DirectiveError(f"invalid signal: {reason}", reason)
