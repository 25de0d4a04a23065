"""sattach's connections to a running step (the agent's end): besides srun's own connection, a step's
I/O may go to listeners that attached later, each speaking corral.stepio as srun does. Each gets the
tasks' output from the moment it attached and every task's exit (those that ended before it attached
first); its stdin, signal and window frames are obeyed like srun's. Unlike srun's, an attachment that
goes away only detaches: it kills nothing."""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from corral import stepio

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 3.0
SEND_TIMEOUT_S = 10.0  # an attachment that reads nothing for this long is dropped, not waited for

Handler = Callable[[bytes, int, bytes], Awaitable[None]]


class Attachments:
    def __init__(self, what: str, node_name: str, ranks: list[int], handle: Handler) -> None:
        self._what = what
        self._node_name = node_name
        self._ranks = ranks
        self._handle = handle
        self._writers: dict[asyncio.StreamWriter, asyncio.Task[None]] = {}
        self._exits: list[bytes] = []  # exit frames sent so far: a later attachment gets them first
        self._closed = False

    async def attach(self, host: str, port: int, token: str) -> None:
        """Connect to the listener and say hello; failures are logged (sattach reports its own)."""
        if self._closed:
            return
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            log.warning("%s: cannot attach to %s:%d: %s", self._what, host, port, exc)
            return
        if self._closed:
            writer.close()
            return
        writer.write(stepio.hello(token, self._node_name, self._ranks) + b"".join(self._exits))
        self._writers[writer] = asyncio.get_running_loop().create_task(self._read(reader, writer))
        log.info("%s: attached to %s:%d", self._what, host, port)

    async def send(self, data: bytes) -> None:
        if data[:1] == stepio.EXIT:
            self._exits.append(data)
        for writer in list(self._writers):
            try:
                writer.write(data)
                await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)
            except (ConnectionError, OSError, RuntimeError, TimeoutError):
                self._detach(writer)

    async def close(self) -> None:
        """The step is over: end every attachment (after its last exit frame)."""
        self._closed = True
        for writer in list(self._writers):
            try:
                writer.write_eof()
                await asyncio.wait_for(writer.drain(), SEND_TIMEOUT_S)
            except (ConnectionError, OSError, RuntimeError, TimeoutError):
                pass
            self._detach(writer)

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                kind, rank, length = stepio.HEADER.unpack(await reader.readexactly(stepio.HEADER.size))
                if length > stepio.MAX_PAYLOAD:
                    raise stepio.ProtocolError(f"frame of {length} bytes")
                await self._handle(kind, rank, await reader.readexactly(length) if length else b"")
        except (asyncio.IncompleteReadError, ConnectionError, OSError, stepio.ProtocolError, ValueError):
            pass
        self._detach(writer, reading=False)

    def _detach(self, writer: asyncio.StreamWriter, reading: bool = True) -> None:
        task = self._writers.pop(writer, None)
        if task is None:
            return
        if reading:
            task.cancel()
        writer.close()
        log.info("%s: an attachment ended", self._what)
