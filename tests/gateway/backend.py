"""A small replica for the gateway's tests and benchmark, run as its own process:
`python -m tests.gateway.backend --name NAME [--port P]`; prints its port on the first line of stdout.

  /who            its name (which replica answered)
  /slow?s=S       answers after S seconds
  /sse?n=N&gap=G  N server-sent events, G seconds apart ("data: token-I")
  /chunks?n=N&gap=G  N chunks of a chunked body, G seconds apart
  /echo           the request's method, path, headers and body as JSON
  /ws             a WebSocket that echoes each message
  /hello          a 13-byte body (the benchmark's)
"""
from __future__ import annotations

import argparse
import asyncio
import socket
import sys

from aiohttp import WSMsgType, web


class Replica:
    """The handlers of one replica named `name`."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def who(self, request: web.Request) -> web.Response:
        return web.Response(text=self.name)

    async def hello(self, request: web.Request) -> web.Response:
        return web.Response(text="hello, world\n")

    async def slow(self, request: web.Request) -> web.Response:
        await asyncio.sleep(float(request.query.get("s", "1")))
        return web.Response(text=self.name)

    async def sse(self, request: web.Request) -> web.StreamResponse:
        return await _stream(request, "text/event-stream", "data: token-{i}\n\n")

    async def chunks(self, request: web.Request) -> web.StreamResponse:
        return await _stream(request, "text/plain", "chunk-{i};")

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"name": self.name, "method": request.method, "path": request.raw_path,
                                  "headers": dict(request.headers), "body": body.decode(errors="replace")})

    async def ws(self, request: web.Request) -> web.WebSocketResponse:
        socket_ = web.WebSocketResponse(protocols=("echo",))
        await socket_.prepare(request)
        async for message in socket_:
            if message.type == WSMsgType.TEXT and message.data == "close":
                await socket_.close(code=4001)
            elif message.type == WSMsgType.TEXT:
                await socket_.send_str(f"{self.name}:{message.data}")
            elif message.type == WSMsgType.BINARY:
                await socket_.send_bytes(message.data)
        return socket_


async def _stream(request: web.Request, content_type: str, frame: str) -> web.StreamResponse:
    count, gap = int(request.query.get("n", "5")), float(request.query.get("gap", "0.2"))
    response = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    await response.prepare(request)
    for i in range(count):
        if i:
            await asyncio.sleep(gap)
        await response.write(frame.format(i=i).encode())
    await response.write_eof()
    return response


def build(name: str) -> web.Application:
    replica = Replica(name)
    app = web.Application()
    for path, handler in (("/who", replica.who), ("/hello", replica.hello), ("/slow", replica.slow),
                          ("/sse", replica.sse), ("/chunks", replica.chunks), ("/ws", replica.ws)):
        app.router.add_get(path, handler)
    app.router.add_post("/slow", replica.slow)
    app.router.add_route("*", "/echo", replica.echo)
    app.router.add_route("*", "/echo/{tail:.*}", replica.echo)
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(sock.getsockname()[1], flush=True)
    sys.stdout.close()
    web.run_app(build(args.name), sock=sock, print=None, access_log=None, handle_signals=True)


if __name__ == "__main__":
    main()
