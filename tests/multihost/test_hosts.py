"""The multi-host mode's set-up itself: each virtual host has its own address and name, the others
resolve it, and everything is gone after the teardown."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.multihost.netns import IP, NETNS_ETC, VirtualNetwork, unavailable_reason

pytestmark = pytest.mark.slow


def test_hosts_see_each_other_by_name_and_vanish_after_teardown():
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    net = VirtualNetwork(["alpha", "beta"]).create()
    try:
        beta = net.hosts["beta"]
        probe = ("import socket; print(socket.gethostname(), socket.gethostbyname('alpha'), "
                 "socket.gethostbyname(socket.gethostname()))")
        done = subprocess.run(beta.command([sys.executable, "-c", probe]), capture_output=True, text=True)
        assert done.stdout.split() == ["beta", net.hosts["alpha"].address, beta.address], done.stderr
    finally:
        net.destroy()
    namespaces = subprocess.run([IP, "netns", "list"], capture_output=True, text=True).stdout
    assert net.tag not in namespaces
    assert net.root_link not in subprocess.run([IP, "link"], capture_output=True, text=True).stdout
    assert not list(NETNS_ETC.glob(f"corral-{net.tag}-*"))
