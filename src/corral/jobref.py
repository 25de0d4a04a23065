"""Job ids as people and programs write them, in Slurm's forms and no others:

    N             job N; for an array's id (its first task's id), the whole array, as Slurm reads it
    N_I           task I of array N
    N_[1-3,5]     those tasks of array N (where a list of tasks applies)
    N_*           every task of array N (scancel)
    N.S, N_I.S    a step: a number, `batch`, `extern` or `interactive` (where steps apply)

Python's int() is no parser for these: int("1_5") is 15 (underscores group digits), and int() also
takes " 3", "+3" and Unicode digits ("٣" is 3), as str.isdigit() does. So `corral cancel 1_5` once
cancelled job 15. Here digits are ASCII 0-9 only, and every number fits the database's signed 64-bit
INTEGER. One parser for the CLI, the API, the controller and the Slurm commands: stdlib-only and
import-free, since the Slurm commands load it on their start-up path."""
from __future__ import annotations

MAX_ID = 2**63 - 1  # the largest INTEGER the database stores: job ids, task indices, step ids
STEP_NAMES = frozenset({"batch", "extern", "interactive"})
ALL_TASKS = ((0, MAX_ID),)  # `N_*`
_MAX_DIGITS = len(str(MAX_ID))


class JobIdError(ValueError):
    """A job id that is not one of the accepted forms; the message names the text and says why."""


def ascii_number(text: str, maximum: int = MAX_ID) -> int | None:
    """The value of `text` when it is ASCII digits only (no sign, space, underscore or other script's
    digits) and at most `maximum`; None otherwise."""
    if not text or not text.isascii() or not text.isdigit() or len(text.lstrip("0")) > _MAX_DIGITS:
        return None
    value = int(text)
    return value if value <= maximum else None


class JobRef:
    """One parsed id. `tasks` is None (no task part: the job, or a whole array) or the task indices
    as inclusive (first, last) ranges; `step` is None or the step as written (`0`, `batch`)."""

    __slots__ = ("text", "job_id", "tasks", "step")

    def __init__(self, text: str, job_id: int, tasks: tuple[tuple[int, int], ...] | None = None,
                 step: str | None = None) -> None:
        self.text, self.job_id, self.tasks, self.step = text, job_id, tasks, step

    def has_task(self, index: int | None) -> bool:
        if self.tasks is None or index is None:
            return False
        return any(first <= index <= last for first, last in self.tasks)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRef) and (self.text, self.job_id, self.tasks, self.step) == (
            other.text, other.job_id, other.tasks, other.step)

    def __hash__(self) -> int:
        return hash((self.text, self.job_id, self.tasks, self.step))

    def __repr__(self) -> str:
        return f"JobRef({self.text!r}, {self.job_id!r}, {self.tasks!r}, {self.step!r})"

    def __str__(self) -> str:
        return self.text


def parse_job_id(text: str) -> int:
    """A plain job id `N`: the forms with a task or a step are refused."""
    return parse_job_ref(text, tasks=False).job_id


def parse_job_ref(text: str, *, tasks: bool = True, task_lists: bool = False, all_tasks: bool = False,
                  steps: bool = False) -> JobRef:
    """`N`, and `N_I` unless tasks=False; `N_[ranges]`, `N_*` and `N.S` only where allowed.
    Raises JobIdError."""
    allowed = (tasks, task_lists, all_tasks, steps)
    if not text:
        raise JobIdError("invalid job id '': empty")
    head, dot, step = text.partition(".")
    job_text, underscore, task_text = head.partition("_")
    job_id = _number(text, job_text, allowed, "job ids")
    if job_id == 0:
        raise JobIdError(f"invalid job id {text!r}: job ids start at 1")
    found = None
    if underscore:
        if not tasks:
            raise _refused(text, "an array task is not accepted here", allowed)
        found = _task_part(text, task_text, allowed)
    if dot:
        if not steps:
            raise _refused(text, "a step is not accepted here", allowed)
        if task_text.startswith("["):
            raise _refused(text, "a list of tasks takes no step", allowed)
        if step not in STEP_NAMES:
            _number(text, step, allowed, "step ids")
    return JobRef(text, job_id, found, step if dot else None)


def parse_job_list(text: str, **forms: bool) -> list[JobRef]:
    """A comma-separated list (commas inside `[...]` belong to a task list); empty items vanish, as in
    Slurm's strtok lists."""
    return [parse_job_ref(item, **forms) for item in split_job_list(text)]


def split_job_list(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    items.append(text[start:])
    return [item for item in items if item]


def _task_part(text: str, task_text: str, allowed: tuple[bool, ...]) -> tuple[tuple[int, int], ...]:
    if task_text == "*":
        if not allowed[2]:
            raise _refused(text, "`_*` is not accepted here", allowed)
        return ALL_TASKS
    if task_text.startswith("[") and task_text.endswith("]"):
        if not allowed[1]:
            raise _refused(text, "a list of tasks is not accepted here", allowed)
        return tuple(_task_range(text, item, allowed) for item in task_text[1:-1].split(","))
    index = _number(text, task_text, allowed, "task ids")
    return ((index, index),)


def _task_range(text: str, item: str, allowed: tuple[bool, ...]) -> tuple[int, int]:
    first_text, dash, last_text = item.partition("-")
    first = _number(text, first_text, allowed, "task ids")
    last = _number(text, last_text, allowed, "task ids") if dash else first
    if last < first:
        raise JobIdError(f"invalid job id {text!r}: the task range {item!r} runs backwards")
    return first, last


def _number(text: str, part: str, allowed: tuple[bool, ...], what: str) -> int:
    value = ascii_number(part)
    if value is None:
        if part and part.isascii() and part.isdigit():
            raise JobIdError(f"invalid job id {text!r}: {what} go up to {MAX_ID}")
        raise _refused(text, None, allowed)
    return value


def _refused(text: str, why: str | None, allowed: tuple[bool, ...]) -> JobIdError:
    tasks, task_lists, all_tasks, steps = allowed
    forms = ["N"] + ["N_I"] * tasks + ["N_[I-J,K]"] * task_lists + ["N_*"] * all_tasks + ["N.S"] * steps
    expected = forms[0] if len(forms) == 1 else f"{', '.join(forms[:-1])} or {forms[-1]}"
    return JobIdError(f"invalid job id {text!r}: {why + '; ' if why else ''}expected {expected} "
                      "(ASCII digits only)")
