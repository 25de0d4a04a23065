"""corral.slurm.gpu_values repeats corral.jobscript.values' GPU parsers (without dataclasses' import
time): both must read every text alike."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.jobscript import values
from corral.jobscript.errors import DirectiveError
from corral.slurm import gpu_values

TEXTS = st.text(alphabet="gpu:a100,h.-_ 0123nonNONE", max_size=16)
EXAMPLES = ["1", "a100:8", "gpu", "gpu:2", "gpu:a100:2", "gpu:a100", "none", " gpu:1 ", "gpu:1,gpu:2", "gpu:1a:2",
            "mps:1", "gpu:a:b:1", ":3", "", "gpu:_x.1:0"]


def answer(parse, text: str):
    try:
        found = parse(text)
    except DirectiveError as exc:
        return ("error", str(exc), exc.reason)
    return None if found is None else (found.count, found.model)


@pytest.mark.parametrize("text", EXAMPLES)
@pytest.mark.parametrize("name", ["gpu_count", "gres_gpus"])
def test_examples_read_alike(name, text):
    assert answer(getattr(gpu_values, name), text) == answer(getattr(values, name), text)


@given(TEXTS)
def test_any_text_reads_alike(text):
    for name in ("gpu_count", "gres_gpus"):
        assert answer(getattr(gpu_values, name), text) == answer(getattr(values, name), text)
