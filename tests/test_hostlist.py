"""corral.hostlist: names come back as they were written, nothing is read as another name, and one
expression makes at most 65,536 names, counted before any is made (`n[1-100000000]` once took 82 s
of the controller's time)."""
from __future__ import annotations

import ast
import subprocess
import sys
import time

import pytest

from corral import hostlist
from corral.hostlist import MAX_HOSTS, HostlistError, check_node_name, compress, expand


@pytest.mark.parametrize(("expression", "hosts"), [
    ("node[1-3,05],gpu7", ["node1", "node2", "node3", "node05", "gpu7"]),
    ("a[1-2]b[3-4]c", ["a1b3c", "a1b4c", "a2b3c", "a2b4c"]),
    ("g[08-10]", ["g08", "g09", "g10"]),
    (" n[1-2],,x ", ["n1", "n2", "x"]),
    ("", []),
])
def test_expand(expression, hosts) -> None:
    assert hostlist.expand(expression) == hosts


@pytest.mark.parametrize(("expression", "problem"), [
    ("n[1-", "unbalanced '['"), ("n]1", "unbalanced ']'"), ("n[]", "bad range ''"), ("n[a-b]", "bad range"),
    ("n[3-1]", "descending range '3-1'"),
])
def test_malformed(expression, problem) -> None:
    with pytest.raises(hostlist.HostlistError) as caught:
        hostlist.expand(expression)
    assert problem in str(caught.value)


def test_compress_and_order() -> None:
    assert hostlist.compress(["n11", "n10", "n2", "n1", "x", "g001", "g002"]) == "g[001-002],n[1-2,10-11],x"
    assert sorted(["n10", "n9", "m"], key=hostlist.sort_key) == ["m", "n9", "n10"]


def test_the_cap_is_slurms_64k_hosts() -> None:
    assert len(hostlist.expand(f"n[1-{hostlist.MAX_HOSTS}]")) == hostlist.MAX_HOSTS
    assert hostlist.expand("n[1-3]", limit=3) == ["n1", "n2", "n3"]
    with pytest.raises(hostlist.HostlistError, match="names more than 3 hosts"):
        hostlist.expand("n[1-2],m[1-2]", limit=3)


@pytest.mark.parametrize("expression", [
    "n[1-70000]",
    "a[1-300]b[1-300]",  # ranges multiply
    "n[1-1000000000000]",
    "a[1-100000],b[1-100000000]",
])
def test_too_many_hosts_fail_before_any_is_made(expression) -> None:
    started = time.perf_counter()
    with pytest.raises(hostlist.HostlistError) as caught:
        hostlist.expand(expression)
    assert time.perf_counter() - started < 0.5
    assert str(caught.value) == f"hostlist {expression!r} names more than 65536 hosts"


def test_a_long_bad_expression_is_shown_cut_short() -> None:
    with pytest.raises(hostlist.HostlistError) as caught:
        hostlist.expand("n" * 10_000 + "[1-")
    assert len(str(caught.value)) < 200


def test_importing_it_costs_nothing() -> None:
    """The Slurm commands read their node options with it at start-up: no `re`."""
    code = "import sys\nimport corral.hostlist\nprint(sorted(sys.modules))"
    loaded = ast.literal_eval(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                             check=True).stdout)
    assert "re" not in loaded


def test_expand_and_compress():
    assert expand("node[1-3,05],gpu7") == ["node1", "node2", "node3", "node05", "gpu7"]
    assert compress(["node1", "node2", "node3", "gpu7"]) == "gpu7,node[1-3]"


@pytest.mark.parametrize("expression", ["node[\u0661-\u0662]", "node[1-\u0662]", "node[1_0]", "node[+1]",
                                        "node[ 1]", "node[1-2 ]", f"node[0-{MAX_HOSTS}]", "n[0-300]x[0-300]",
                                        "node[1-" + "9" * 5000 + "]"])
def test_ranges_take_ascii_digits_and_a_bounded_count(expression):
    """int() reads "\u0661" and "1_0" as 1 and 10: `node[\u0661-\u0662]` named node1 and node2."""
    with pytest.raises(HostlistError):
        expand(expression)


def test_compress_keeps_other_scripts_digits_as_they_are():
    """`\\d` matched "\u0663" and int() read it as 3: gpu\u0663 compressed to gpu3, another node."""
    assert compress(["gpu\u0663", "gpu2"]) == "gpu2,gpu\u0663"


@pytest.mark.parametrize("name", ["node1", "gpu-a100.rack2", "n_1", "N1"])
def test_node_names(name):
    assert check_node_name(name) == name


@pytest.mark.parametrize("name", ["", "a,b", "node[1-2]", "node 1", "node\u0661", "-n", "n\n", "x" * 254])
def test_node_names_that_hostlists_would_misread_are_refused(name):
    with pytest.raises(HostlistError):
        check_node_name(name)
