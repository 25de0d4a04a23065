"""Slurm's output filename patterns (%j, %x, %N, %t, ...), expanded as slurmstepd does: the agent names
the files it opens with them, and `corral show` shows those names."""
from __future__ import annotations

from _collections_abc import Callable

# What %a expands to for a job that is not part of an array (Slurm's NO_VAL, printed unsigned).
NO_ARRAY_TASK_ID = 4294967294
# Zero-padding width is capped, as in Slurm's fname.c (MAX_WIDTH).
MAX_PATTERN_WIDTH = 10


def expand_pattern(
    pattern: str,
    *,
    job_id: int,
    job_name: str,
    user: str,
    node_name: str,
    node_index: int,
    task_rank: int,
    array_job_id: int | None = None,
    array_task_id: int | None = None,
    step_id: int | None = None,
) -> str:
    """Expand a Slurm output filename pattern as slurmstepd does for a batch job (or, given `step_id`,
    for a step's task: then %s is the step id, %J is `jobid.stepid` and %n the node's index in the step).

    %j job id, %J job id + ".batch", %x job name, %u user, %N node name, %n node index, %t task rank,
    %s step ("batch"), %A array job id (the job id outside arrays), %a array task id (4294967294 outside
    arrays), %% a literal %. A width such as %5j zero-pads numbers (capped at 10) and is ignored for text.
    Unknown letters are left as written. A pattern with a backslash is not expanded at all, only stripped
    of its backslashes (Slurm's escape rule).
    """
    if "\\" in pattern:
        return pattern.replace("\\", "")
    numbers = {
        "j": job_id,
        "A": array_job_id if array_job_id is not None else job_id,
        "a": array_task_id if array_task_id is not None else NO_ARRAY_TASK_ID,
        "n": node_index,
        "t": task_rank,
    }
    texts = {"x": job_name, "u": user, "N": node_name, "s": "batch"}
    if step_id is not None:
        numbers["s"] = step_id
        del texts["s"]

    def replace(width_text: str, letter: str, written: str) -> str:
        width = min(int(width_text), MAX_PATTERN_WIDTH) if width_text else 0
        if letter in numbers:
            return f"{numbers[letter]:0{width}d}"
        if letter == "J":
            return f"{job_id:0{width}d}." + ("batch" if step_id is None else str(step_id))
        if letter in texts:
            return texts[letter]
        return written

    return _substituted(pattern, replace)


def _substituted(pattern: str, replace: Callable[[str, str, str], str]) -> str:
    """`pattern` with `%%` as `%` and each `%[digits]LETTER` as replace(digits, LETTER, as written): what
    re.sub(r"%(%|(\\d*)([A-Za-z]))", ...) does, without `re` (~10 ms that `corral show` need not pay)."""
    out: list[str] = []
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        if pattern.startswith("%", index + 1):
            out.append("%")
            index += 2
            continue
        after = index + 1
        while after < end and pattern[after].isdecimal():  # \d: any Unicode decimal digit
            after += 1
        if after < end and pattern[after].isascii() and pattern[after].isalpha():
            out.append(replace(pattern[index + 1:after], pattern[after], pattern[index:after + 1]))
            index = after + 1
        else:  # no directive here: the % stays as written
            out.append(char)
            index += 1
    return "".join(out)
