"""The ports a node's agent gives service replicas (issue 22): each named port of a launch, fixed or "any
free one" (0), handed to the replica's tasks as CORRAL_PORT_<NAME> and PORT (the first).

Picking a free port by binding port 0 and closing the socket is racy: between the agent's close and the
replica's bind, the kernel may hand the same port to a second bind(0). The agent therefore remembers every
port it has handed out (`PortBook`) until the replica ends here, and picks again when the kernel offers one
it holds: two replicas on one node never get the same port from this agent, even when they are launched
in the same instant (launches are handled one at a time on the agent's event loop). What the book cannot
stop is an unrelated process on the node binding the port in that window (a client's ephemeral port, say):
the replica then fails to bind, exits, and is restarted with new ports, as a crash is. Handing the bound
socket itself to the replica (systemd's socket activation) would close that window, at the price of every
server having to accept an inherited socket; corral does not ask that.

A fixed port is checked by binding it on every address: a port in use by anything on the node (a listener
on one address included) fails the launch, naming the port.
"""
from __future__ import annotations

import errno
import socket
from collections.abc import Sequence

from corral.protocol import PortRequest

PICK_ATTEMPTS = 64  # bind(0) offering ports this agent holds that many times in a row: something is wrong


class PortUnavailable(Exception):
    """A launch's port cannot be had: the message names the port and why."""


def port_variables(ports: dict[str, int]) -> dict[str, str]:
    """CORRAL_PORT_<NAME> (upper-cased) for each port, and PORT for the first."""
    variables = {f"CORRAL_PORT_{name.upper()}": str(number) for name, number in ports.items()}
    if ports:
        variables["PORT"] = str(next(iter(ports.values())))
    return variables


class PortBook:
    """The ports this agent has handed to the replicas running here, by job."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._holder: dict[int, int] = {}  # port -> the job it was handed to

    def held_by(self, job_id: int) -> dict[int, int]:
        return {port: job for port, job in self._holder.items() if job == job_id}

    def reserve(self, job_id: int, requests: Sequence[PortRequest]) -> dict[str, int]:
        """A port for each request, in order, held for `job_id` until `release`; all or none (PortUnavailable
        naming the port, and nothing is held)."""
        names = [request.name.upper() for request in requests]
        if len(set(names)) != len(names):
            raise PortUnavailable(f"the launch names a port twice: {', '.join(r.name for r in requests)}")
        chosen: dict[str, int] = {}
        try:
            for request in requests:
                port = self._fixed(job_id, request) if request.port else self._pick()
                self._holder[port] = job_id
                chosen[request.name] = port
        except PortUnavailable:
            for port in chosen.values():
                del self._holder[port]
            raise
        return chosen

    def keep(self, job_id: int, ports: dict[str, int]) -> list[str]:
        """Hold the ports of a replica an earlier agent started here (adoption): what could not be held (a
        port another holds), for the log."""
        clashes = []
        for name, port in ports.items():
            holder = self._holder.setdefault(port, job_id)
            if holder != job_id:
                clashes.append(f"port {port} ({name}) is also held by job {holder}")
        return clashes

    def release(self, job_id: int) -> None:
        for port in [p for p, job in self._holder.items() if job == job_id]:
            del self._holder[port]

    def _fixed(self, job_id: int, request: PortRequest) -> int:
        port = request.port
        holder = self._holder.get(port)
        if holder is not None and holder != job_id:
            raise PortUnavailable(f"port {port} ({request.name}) is already given to job {holder} on {self._node}")
        try:
            _bind(port).close()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortUnavailable(f"port {port} ({request.name}) is already in use on {self._node}") from None
            raise PortUnavailable(f"port {port} ({request.name}) cannot be bound on {self._node}: "
                                  f"{exc.strerror or exc}") from None
        return port

    def _pick(self) -> int:
        for _ in range(PICK_ATTEMPTS):
            try:
                with _bind(0) as sock:
                    port = int(sock.getsockname()[1])
            except OSError as exc:
                raise PortUnavailable(f"no free port on {self._node}: {exc.strerror or exc}") from None
            if port not in self._holder:
                return port
        raise PortUnavailable(f"no free port on {self._node}: the kernel kept offering ports already handed out")


def _bind(port: int) -> socket.socket:
    """A TCP socket bound to `port` on every address (IPv4 and IPv6 where the host has IPv6)."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # the IPv4 addresses too
        address: tuple[str, int] = ("::", port)
    except OSError:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", port)
    try:
        # As servers do: a port whose last connection lingers in TIME_WAIT is free for a listener.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock
