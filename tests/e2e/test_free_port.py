"""The harness's free ports (tests/e2e/harness.py): a port a test hands to a server it starts must not be one
that any outgoing connection on the host may take as its source port before the server binds it. A port
from bind(0) is such a one (the kernel's ephemeral range): `corral up --port` found one taken, refused to
start and printed nothing on stdout (test_stop's 'is up' in '', once in a full run)."""
from __future__ import annotations

import socket
from pathlib import Path

from tests.e2e.harness import free_port


def test_a_servers_free_port_is_below_the_range_outgoing_connections_take_their_ports_from():
    lowest_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert all(1024 <= port < lowest_ephemeral for port in ports), sorted(ports)[-5:]
    assert len(set(ports)) > 150, "chosen at random, not the same few each time"
    for port in ports[:20]:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))  # free indeed
