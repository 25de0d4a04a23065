"""Slurm's output filename patterns (%j, %x, %N, %t, ...), expanded as slurmstepd does: the agent names
the files it opens with them, and `corral show` shows those names."""
from __future__ import annotations

import re

# What %a expands to for a job that is not part of an array (Slurm's NO_VAL, printed unsigned).
NO_ARRAY_TASK_ID = 4294967294
# Zero-padding width is capped, as in Slurm's fname.c (MAX_WIDTH).
MAX_PATTERN_WIDTH = 10
_PATTERN = re.compile(r"%(%|(\d*)([A-Za-z]))")


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

    def replace(match: re.Match[str]) -> str:
        if match.group(1) == "%":
            return "%"
        width_text, letter = match.group(2), match.group(3)
        width = min(int(width_text), MAX_PATTERN_WIDTH) if width_text else 0
        if letter in numbers:
            return f"{numbers[letter]:0{width}d}"
        if letter == "J":
            return f"{job_id:0{width}d}." + ("batch" if step_id is None else str(step_id))
        if letter in texts:
            return texts[letter]
        return match.group(0)

    return _PATTERN.sub(replace, pattern)
