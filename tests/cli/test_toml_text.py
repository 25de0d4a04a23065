import math
import tomllib

import pytest

from corral.api.tenancy import LimitSpec, TenancySpec
from corral.cli.toml_text import dumps

from .standin import canned_tenancy


def test_tenancy_round_trips():
    spec = canned_tenancy()
    spec["limits"] = [LimitSpec(user="bob", max_gpus=4).model_dump(), LimitSpec(account="bio").model_dump()]
    text = dumps(spec)
    assert TenancySpec.model_validate(tomllib.loads(text)).model_dump() == TenancySpec.model_validate(spec).model_dump()
    assert "null" not in text and "None" not in text
    assert text.startswith('default_qos = "normal"\n')  # top-level keys come before any table


def test_shapes():
    data = {"a": 1, "b": [], "c": {"x": 1.5, "y": None}, "d": [{"n": "p"}, {"n": "q", "m": [1, 2]}], "e": None,
            "f": True, "g": {"inner": {"k": "v"}}}
    text = dumps(data)
    assert tomllib.loads(text) == {"a": 1, "b": [], "c": {"x": 1.5}, "d": [{"n": "p"}, {"n": "q", "m": [1, 2]}],
                                   "f": True, "g": {"inner": {"k": "v"}}}
    assert "[[d]]" in text and "[c]" in text


@pytest.mark.parametrize("text", ['quote " and \\ backslash', "tab\tnew\nline", "uni ✓", "del \x7f", "bell \x07", ""])
def test_strings_survive(text):
    assert tomllib.loads(dumps({"s": text, "list": [text], "t": {"k": text}})) == {"s": text, "list": [text],
                                                                                  "t": {"k": text}}


def test_keys_that_are_not_bare_are_quoted():
    data = {"a b": 1, "ü": {"x.y": 2}, "ok_key-1": 3}
    assert tomllib.loads(dumps(data)) == data


def test_special_floats():
    loaded = tomllib.loads(dumps({"inf": math.inf, "minus": -math.inf, "nan": math.nan, "tiny": 1e-300}))
    assert loaded["inf"] == math.inf and loaded["minus"] == -math.inf and math.isnan(loaded["nan"])
    assert loaded["tiny"] == 1e-300


def test_unknown_types_are_refused():
    with pytest.raises(TypeError, match="cannot write set as TOML"):
        dumps({"s": {1}})
