"""The address of this host that another host can reach it at: the one it uses to reach that host. srun
advertises it for its step I/O listener (the agents connect back to it) and an agent for itself (its
tasks' MASTER_ADDR), each towards the controller. Standard library only: srun loads it."""
from __future__ import annotations

import socket


def address_towards(url: str) -> str:
    """This host's source address for traffic to `url`'s host; loopback when that host is loopback.
    OSError when the host name does not resolve or no route leads to it."""
    from urllib.parse import urlsplit  # deferred: it imports re, which srun's start does not need

    host = urlsplit(url if "://" in url else f"http://{url}").hostname or "127.0.0.1"
    if host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # UDP: no packet is sent, the kernel only picks a route
        return probe.getsockname()[0]
