"""corral.hostaddr: which of this host's addresses another host reaches it at."""
from __future__ import annotations

import socket

import pytest

from corral.hostaddr import address_towards
from corral.slurm.srun.step_client import io_address


@pytest.mark.parametrize("url", ["http://127.0.0.1:6817", "http://localhost:6817", "localhost:6817",
                                 "http://[::1]:6817"])
def test_a_loopback_controller_is_reached_from_loopback(url):
    assert address_towards(url) == "127.0.0.1"


def test_another_loopback_address_is_reached_from_the_route_the_kernel_picks():
    assert address_towards("http://127.0.0.2:6817") == "127.0.0.1"


def test_a_name_that_does_not_resolve_is_an_error_for_the_agent_and_srun_falls_back_to_its_host_name():
    with pytest.raises(OSError):
        address_towards("http://no-such-host.invalid:6817")
    assert io_address("http://no-such-host.invalid:6817") == socket.gethostbyname(socket.gethostname())
