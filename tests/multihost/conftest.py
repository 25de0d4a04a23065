from __future__ import annotations

import pytest

from tests.multihost.cluster import MultiHostCluster
from tests.multihost.netns import VirtualNetwork, unavailable_reason

HOSTS = ["head", "login", "gpu1", "gpu2"]  # the controller, the users' host, two compute nodes


@pytest.fixture(scope="module")
def virtual_hosts():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    net = VirtualNetwork(HOSTS).create()
    yield net
    net.destroy()


@pytest.fixture(scope="module")
def multihost(virtual_hosts, tmp_path_factory):
    """One cluster over the virtual hosts, shared by a test module: each test looks at its own jobs."""
    cluster = MultiHostCluster(tmp_path_factory.mktemp("multihost"), virtual_hosts, nodes=["gpu1", "gpu2"])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.kill_controller() if cluster.controller else None
        cluster.stop()
