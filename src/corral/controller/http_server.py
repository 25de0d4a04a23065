"""How the controller serves HTTP: uvicorn with httptools (llhttp, C) on uvloop, with the two deadlines
uvicorn lacks (docs/decisions/0023-http-server-stack.md says why this stack and not h11 on asyncio).

uvicorn 0.54 closes a keep-alive connection `timeout_keep_alive` after a response, but any byte that
arrives cancels that timer for good, and a new connection has none at all: a client could hold a
connection, and a task of the controller's, for ever by sending nothing, or one header byte at a time.
`TimedHttpToolsProtocol` gives every connection two deadlines, measured on the event loop's clock:
- idle: with no request under way, the connection closes `idle_timeout_s` after it opened or after its
  last response (nothing is sent: the client has asked nothing);
- headers: a request whose first byte came must have all its headers `header_timeout_s` after that byte,
  or it gets 408 and the connection closes; and at most MAX_HEAD_BYTES of them (431), as h11 had.
Once a request's headers are in, the request is the application's: its body has the body gate's deadline
(controller/body_gate.py) and a long poll (an agent's, up to 60 s) is not cut.

The subclass follows the parser's callbacks (on_message_begin: a request's first byte; on_headers_complete;
on_message_complete) and leans on HttpToolsProtocol's attributes (cycle, transport, loop, client,
on_response_complete) as uvicorn 0.54 has them (pinned in requirements.lock);
tests/controller/test_body_gate.py drives both deadlines through a real controller process, so an upgrade
that moves them fails there."""
from __future__ import annotations

import asyncio
import json
import logging
import math

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger("corral.controller.http")

# The most a request's head (request line and headers) may take while it is incomplete: h11's default,
# which the controller had before. llhttp has no such limit of its own.
MAX_HEAD_BYTES = 16 * 1024
# uvicorn's name for the event loop the controller runs on (libuv, through uvloop).
EVENT_LOOP = "uvloop"


def _refusal(status: bytes, detail: str) -> bytes:
    """A refusal with the `{"detail": ...}` body of every refusal; the connection closes after it."""
    body = json.dumps({"detail": detail}).encode()
    return (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, len(body), body))


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the idle and header deadlines; `timed_protocol` sets them."""

    idle_timeout_s: float = 5.0
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._phase = ""  # "idle", "headers", "serving" or "draining" (the rest of a body no one reads)
        self._request_open = False  # from a request's first byte to the end of its body
        self._headers_in = False
        self._head_bytes = 0  # of a head not yet whole
        super().connection_made(transport)
        self._follow_request()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._request_open and not self._headers_in and not self.transport.is_closing():
            # Still in a request's head after this chunk: all of it was head (but a pipelined request's
            # tail before it), held by the parser until the head is whole.
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self.transport.write(_refusal(b"431 Request Header Fields Too Large",
                                              f"the request's headers are over {MAX_HEAD_BYTES:,} bytes"))
                self.transport.close()
        else:
            self._head_bytes = 0
        self._follow_request()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._request_open, self._headers_in = True, False

    def on_headers_complete(self) -> None:
        self._headers_in = True
        super().on_headers_complete()
        if self.cycle is not None and not isinstance(self.cycle.transport, CorkedWrites):
            self.cycle.transport = CorkedWrites(self.transport, self.loop)  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._request_open = False
        super().on_message_complete()

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
        elif self._request_open and self._headers_in:
            self._enter("draining", self.header_timeout_s)
        elif self._request_open:
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
            self.transport.write(_refusal(b"408 Request Timeout", "the request's headers did not arrive within "
                                                                  f"{self.header_timeout_s:g} s"))
        self.transport.close()


class CorkedWrites:
    """A request's view of its connection's transport that sends a response's head with its body, in one
    system call: uvicorn writes them apart, two sends and, on a local connection, two wake-ups of the client
    where one does. The first write (the head) is held until the next (the body, which a whole response
    writes in the same step of the event loop) or until the end of the loop's current step (call_soon), so
    a streamed response's head is not held back until its first chunk; a close sends it first."""

    __slots__ = ("_transport", "_loop", "_head", "_wrote")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None
        self._wrote = False

    def write(self, data: bytes) -> None:
        if not self._wrote:
            self._wrote = True
            self._head = data
            self._loop.call_soon(self.flush)
            return
        if self._head is not None:
            data, self._head = self._head + data, None
        self._transport.write(data)

    def flush(self) -> None:
        if self._head is not None:
            head, self._head = self._head, None
            if not self._transport.is_closing():
                self._transport.write(head)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def timed_protocol(idle_timeout_s: float, header_timeout_s: float) -> type[TimedHttpToolsProtocol]:
    """The protocol class with these deadlines (uvicorn builds one instance per connection)."""
    return type("TimedHttpToolsProtocol", (TimedHttpToolsProtocol,),
                {"idle_timeout_s": idle_timeout_s, "header_timeout_s": header_timeout_s})


def server_config(app, host: str, port: int, idle_timeout_s: float, header_timeout_s: float,
                  **options) -> uvicorn.Config:
    """uvicorn's configuration for the controller: httptools with both deadlines, on uvloop; its own
    keep-alive timeout (whole seconds) is the idle one rounded up, so the idle deadline closes the connection
    first."""
    return uvicorn.Config(app, host=host, port=port, http=timed_protocol(idle_timeout_s, header_timeout_s),
                          loop=EVENT_LOOP, timeout_keep_alive=math.ceil(idle_timeout_s), **options)
