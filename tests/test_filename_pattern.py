"""corral.filename_pattern expands Slurm's output patterns by hand (no `re`, for `corral show`'s start): the
same result as the regular expression it replaced, on every pattern a seeded random walk produces."""
from __future__ import annotations

import random
import re

import pytest

from corral.filename_pattern import MAX_PATTERN_WIDTH, NO_ARRAY_TASK_ID, expand_pattern

FIELDS = {"job_id": 42, "job_name": "train", "user": "alice", "node_name": "node3", "node_index": 2,
          "task_rank": 7}


def with_regex(pattern: str, step_id: int | None = None) -> str:
    """The implementation before: re.sub over %(%|(\\d*)([A-Za-z]))."""
    if "\\" in pattern:
        return pattern.replace("\\", "")
    numbers = {"j": 42, "A": 42, "a": NO_ARRAY_TASK_ID, "n": 2, "t": 7}
    texts = {"x": "train", "u": "alice", "N": "node3", "s": "batch"}
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
            return f"{42:0{width}d}." + ("batch" if step_id is None else str(step_id))
        if letter in texts:
            return texts[letter]
        return match.group(0)

    return re.sub(r"%(%|(\d*)([A-Za-z]))", replace, pattern)


@pytest.mark.parametrize("pattern", ["slurm-%j.out", "%x_%A_%a.log", "%%j", "%5j", "%012t", "%5%", "%",
                                     "a%", "%%%", "%3", "%Q", "%5Q", "%\u0663j", "%J", "%s", "%é", "\\%j"])
def test_known_patterns(pattern):
    assert expand_pattern(pattern, **FIELDS) == with_regex(pattern)
    assert expand_pattern(pattern, **FIELDS, step_id=3) == with_regex(pattern, step_id=3)


def test_random_patterns_expand_as_the_regex_did():
    rng = random.Random(24)
    alphabet = "%%%%jJxuNntsAaQz0159\u0663é._-/ "
    for _ in range(5000):
        pattern = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert expand_pattern(pattern, **FIELDS) == with_regex(pattern), pattern
