"""A controller started before its PostgreSQL server answers waits for it (`--db-wait`), as a standby
started while the database restarts must; one that never answers is an error once the wait is over."""
from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.e2e.harness import Cluster, free_port, wait_for
from tests.store.pg import fresh_pg_schema, pg_server_url_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


class Relay(threading.Thread):
    """A TCP relay from 127.0.0.1:`port` to the real server: the database "comes up" when it starts."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.port, self.target = port, target
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._pipe, "127.0.0.1", self.port))
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(copy(reader, up_writer), copy(up_reader, writer), return_exceptions=True)

    def stop(self) -> None:
        def shut() -> None:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.call_soon(self.loop.stop)

        self.loop.call_soon_threadsafe(shut)


def _through(url: str, port: int) -> tuple[str, tuple[str, int]]:
    parts = urlsplit(url)
    target = (parts.hostname or "127.0.0.1", parts.port or 5432)
    netloc = parts.netloc.rsplit("@", 1)[0] + f"@127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc)), target


def test_a_controller_waits_for_a_database_that_is_not_up_yet(tmp_path) -> None:
    with fresh_pg_schema(pg_server_url_or_skip()) as url:
        port = free_port()
        relayed, target = _through(url, port)
        cluster = Cluster(tmp_path, nodes=1, gpus=1, db=relayed)
        cluster.controller = cluster._spawn(
            ["-m", "corral.controller", "--listen", f"127.0.0.1:{cluster.port}", "--db", relayed,
             "--secret-file", str(cluster.secret_file), "--config", str(cluster.config_file)], "controller.log")
        relay = Relay(port, target)
        try:
            time.sleep(3.0)
            assert cluster.controller.poll() is None, "still waiting for its database"
            assert "trying again for up to" in (tmp_path / "controller.log").read_text()
            relay.start()
            relay.ready.wait(10)
            wait_for(cluster._healthy, 30, message="the controller, once its database answers")
        finally:
            cluster.stop()
            relay.stop()


def test_a_database_that_never_answers_is_an_error_after_the_wait(tmp_path) -> None:
    pg_server_url_or_skip()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/corral_test"
    (tmp_path / "secret").write_text("s\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "corral.controller", "--listen", f"127.0.0.1:{free_port()}",
                           "--db", url, "--db-wait", "1.5", "--secret-file", str(tmp_path / "secret")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "corral-controller: error: opening" in done.stderr
    assert "connection failed" in done.stderr and time.monotonic() - started >= 1.5
