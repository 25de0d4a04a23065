"""corral.hostlist: names come back as they were written, and nothing is read as another name."""
from __future__ import annotations

import pytest

from corral.hostlist import MAX_HOSTS, HostlistError, check_node_name, compress, expand


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
