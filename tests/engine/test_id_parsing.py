"""The engine's own readers of ids and indexes: ASCII digits only. `re`'s `\\d` and int() take any
script's digits, so `afterok:\u0661\u0665` depended on job 15 and `--array=\u0663` made task 3."""
from __future__ import annotations

import pytest

from corral.engine.arrays import ArrayError, parse_array
from corral.engine.dependencies import DependencyError, parse_dependency


def test_dependency_targets():
    clauses = parse_dependency("afterok:12:7_3+5,afterany:9").clauses
    assert [c.targets for c in clauses] == [((12, None), (7, 3)), ((9, None),)]


@pytest.mark.parametrize("token", ["\u0661\u0665", "1_5_3", "15__2", "+3", "0x10", "1e3", "0", "7_[1-2]", "12+",
                                   "12+\u0661", "9223372036854775808"])
def test_dependency_targets_that_are_no_id_are_refused(token):
    with pytest.raises(DependencyError) as caught:
        parse_dependency(f"afterok:{token}")
    assert repr(token) in str(caught.value) or repr(f"afterok:{token}") in str(caught.value)


def test_array_indexes():
    assert parse_array("0-4:2,7%2") == ([0, 2, 4, 7], 2)


@pytest.mark.parametrize("spec", ["\u0663", "0-\u0663", "0-9%\u0662", "1_0", "0-9%0", "9" * 5000])
def test_array_indexes_that_are_no_number_are_refused(spec):
    with pytest.raises(ArrayError):
        parse_array(spec)
