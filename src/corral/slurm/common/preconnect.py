"""A connection to the controller made before the call that uses it (issue 24 item 1; decision 0021, third
pass).

In the command helper (corral.slurm.helper), the child forked to wait for the next call connects, while it
waits, to the controller the last call talked to: the call then finds its TCP connection made and already
accepted by the controller, and neither the connect nor the controller's accept is on its path. What keeps
it from ever doing a request twice or sending it where the call would not:
- it is used only for a plain-http request to the same host and port as the call's own (`take(host, port)`),
  and only once, for the call's first request;
- it was never written on, and before the request is written one non-blocking peek says whether the controller
  closed it meanwhile (an idle connection is closed after the controller's idle deadline, `[http]
  idle_timeout_s`, 1 s at the least): a closed one is dropped and the request goes on a new connection, as it
  would without it. Nothing was sent on it, so nothing can have been done;
- it is used only while younger than FRESH_S, under that shortest deadline: the controller's deadline starts
  no sooner than connect() returned here, so it cannot be closing the connection for idleness as the request
  arrives. Once the request is written, a failure is what it is on any connection: a request that may have
  been acted on is never sent again.
The address is the one the last call connected to (no name lookup while a call may be waiting); the waiting
child connects without blocking and the call uses the connection only if it is established by then.
Outside the helper nothing is connected ahead: take() finds nothing, and learned() tells no one."""
from __future__ import annotations

import _socket
import sys
import time

# Under the controller's shortest idle deadline (controller/settings.py: idle_timeout_s >= 1 s). A workflow
# tool's calls come milliseconds apart; a call after a longer pause connects as before.
FRESH_S = 0.75

Address = tuple[int, str, int]  # the socket family, the IP address and the port that the last call connected to

_ahead: dict[tuple[str, int], tuple[_socket.socket, float]] = {}


def connect_ahead(host: str, port: int, address: Address) -> None:
    """Start connecting to `address` for a later request to `host`:`port` (the endpoint as the URL names it).
    Never waits: a connection that is not yet made when the call comes is not used."""
    family, ip, ip_port = address
    try:
        sock = _socket.socket(family, _socket.SOCK_STREAM)
    except OSError:
        return
    sock.setblocking(False)
    try:
        sock.connect((ip, ip_port))
    except BlockingIOError:
        pass  # under way: take() uses it only if it is made by then
    except OSError:
        sock.close()
        return
    _ahead[(host, port)] = (sock, time.monotonic())


def take(host: str, port: int) -> _socket.socket | None:
    """The connection made ahead to `host`:`port`, if it is established, fresh and still open (None
    otherwise: the request then connects itself). In blocking mode; never handed out twice."""
    found = _ahead.pop((host, port), None)
    if found is None:
        return None
    sock, opened = found
    if time.monotonic() - opened < FRESH_S and _open(sock):
        sock.setblocking(True)
        return sock
    sock.close()
    return None


def _open(sock: _socket.socket) -> bool:
    """Connected, and neither closed by the controller nor holding anything it sent (it must send nothing
    before a request)."""
    try:
        sock.getpeername()  # not (yet) connected: OSError
        sock.recv(1, _socket.MSG_PEEK)  # the socket does not block: nothing to read is the good answer
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False  # end of stream (the controller closed it), or bytes it should not have sent


def learned(host: str, port: int, family: int, address: tuple) -> None:
    """A request of this call connected to `address` for `host`:`port`: tell the helper, so that the child
    waiting for the next call connects there ahead. Only when it differs from what this child was told (a
    report wakes the helper, which a call should not do for nothing)."""
    # Loaded by the helper (and by a call with an auth socket); a command in its own process is told nothing,
    # and does not import it (with contextlib, collections) for that.
    credential_reuse = sys.modules.get("corral.slurm.common.credential_reuse")
    reuse = credential_reuse.active() if credential_reuse is not None else None
    if reuse is None or reuse.report_fd is None:
        return
    reuse.report_controller(host, port, (family, str(address[0]), int(address[1])))
