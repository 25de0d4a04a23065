"""How the controller serves HTTP: uvicorn (h11), with the two deadlines uvicorn lacks.

uvicorn 0.54 closes a keep-alive connection `timeout_keep_alive` after a response, but any byte that
arrives cancels that timer for good, and a new connection has none at all: a client could hold a
connection, and a task of the controller's, for ever by sending nothing, or one header byte at a time.
`TimedH11Protocol` gives every connection two deadlines, measured on the event loop's clock:
- idle: with no request under way, the connection closes `idle_timeout_s` after it opened or after its
  last response (nothing is sent: the client has asked nothing);
- headers: a request whose first byte came must have all its headers `header_timeout_s` after that byte,
  or it gets 408 and the connection closes.
Once a request's headers are in, the request is the application's: its body has the body gate's deadline
(controller/body_gate.py) and a long poll (an agent's, up to 60 s) is not cut.

The subclass leans on H11Protocol's attributes (conn, cycle, transport, on_response_complete) as uvicorn
0.54 has them (pinned in requirements.lock); tests/controller/test_body_gate.py drives both deadlines
through a real controller process, so an upgrade that moves them fails there."""
from __future__ import annotations

import asyncio
import json
import logging
import math

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("corral.controller.http")



def _timeout_response(header_timeout_s: float) -> bytes:
    """408, with the `{"detail": ...}` body of every refusal."""
    body = json.dumps({"detail": f"the request's headers did not arrive within {header_timeout_s:g} s"}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (len(body), body))


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the idle and header deadlines; `timed_protocol` sets them."""

    idle_timeout_s: float = 5.0
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "idle", "headers", "serving" or "draining" (the rest of a body no one reads)
        super().connection_made(transport)
        self._follow_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow_request()

    def connection_lost(self, exc: Exception | None) -> None:
        self._enter("closed")
        super().connection_lost(exc)

    def _follow_request(self) -> None:
        """Arm the deadline that fits where the connection is now."""
        if self.transport.is_closing():
            self._enter("closed")
        elif self.cycle is not None and not self.cycle.response_complete:
            self._enter("serving")  # the headers are in: the request is the application's
        elif self.conn.their_state is not h11.IDLE:
            self._enter("draining", self.header_timeout_s)
        elif self.conn.trailing_data[0]:
            self._enter("headers", self.header_timeout_s)  # from the first byte of the request
        else:
            self._enter("idle", self.idle_timeout_s)

    def _enter(self, phase: str, deadline_s: float | None = None) -> None:
        if phase == self._phase:
            return  # its deadline runs on
        self._phase = phase
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        if deadline_s is not None:
            self._deadline = self.loop.call_later(deadline_s, self._expired, phase)

    def _expired(self, phase: str) -> None:
        self._deadline = None
        if self.transport.is_closing() or phase != self._phase:
            return
        if phase == "headers":
            client = "%s:%d" % self.client if self.client else "-"
            log.warning("closed a connection from %s: its request's headers did not arrive within %g s",
                        client, self.header_timeout_s)
            self.transport.write(_timeout_response(self.header_timeout_s))
        self.transport.close()


def timed_protocol(idle_timeout_s: float, header_timeout_s: float) -> type[TimedH11Protocol]:
    """The protocol class with these deadlines (uvicorn builds one instance per connection)."""
    return type("TimedH11Protocol", (TimedH11Protocol,),
                {"idle_timeout_s": idle_timeout_s, "header_timeout_s": header_timeout_s})


def server_config(app, host: str, port: int, idle_timeout_s: float, header_timeout_s: float,
                  **options) -> uvicorn.Config:
    """uvicorn's configuration for the controller: h11 with both deadlines; its own keep-alive timeout (whole
    seconds) is the idle one rounded up, so the idle deadline closes the connection first."""
    return uvicorn.Config(app, host=host, port=port, http=timed_protocol(idle_timeout_s, header_timeout_s),
                          timeout_keep_alive=math.ceil(idle_timeout_s), **options)
