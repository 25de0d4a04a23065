"""Several controllers on one PostgreSQL database, with agents and the test's client reaching whichever leads
through one address: a TCP relay that asks every controller's /status who leads, as a virtual IP or a load
balancer checking /status would. On a change of leader it cuts the connections to the old one."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx

from tests.e2e.harness import API, Cluster, free_port, wait_for


class LeaderRelay:
    def __init__(self, port: int, leader) -> None:
        """`leader()`: the port of the controller that leads now, or None."""
        self.port = port
        self._leader = leader
        self.target: int | None = None
        self._open: list[tuple[int, socket.socket, socket.socket]] = []
        self._guard = threading.Lock()
        self._stopped = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", port))
        self._threads = [threading.Thread(target=self._watch, daemon=True),
                         threading.Thread(target=self._accept, daemon=True)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._listener.close()
        self._cut(keep=None)

    def _watch(self) -> None:
        while not self._stopped.is_set():
            leader = self._leader()
            if leader != self.target:
                self.target = leader
                self._cut(keep=leader)
            time.sleep(0.05)

    def _cut(self, keep: int | None) -> None:
        with self._guard:
            cut = [c for c in self._open if c[0] != keep]
            self._open = [c for c in self._open if c[0] == keep]
        for _, client, upstream in cut:
            for s in (client, upstream):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        deadline = time.monotonic() + 10
        while self.target is None and time.monotonic() < deadline:
            time.sleep(0.02)
        target = self.target
        try:
            if target is None:
                raise OSError("no leader")
            upstream = socket.create_connection(("127.0.0.1", target), timeout=5)
            upstream.settimeout(None)
        except OSError:
            client.close()
            return
        with self._guard:
            self._open.append((target, client, upstream))
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class StandbyCluster(Cluster):
    """`controllers` controllers on `db`, each with its own port and --advertise-url; `url` and `http` are
    the relay's, which reaches the leader."""

    def __init__(self, root: Path, db: str, controllers: int = 2, **kwargs) -> None:
        super().__init__(root, db=db, **kwargs)
        self.ports = [free_port() for _ in range(controllers)]
        self.procs: list[subprocess.Popen | None] = [None] * controllers
        self.direct = [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5,
                                    headers={"Authorization": f"Bearer {self.secret}"}) for port in self.ports]
        self.relay = LeaderRelay(self.port, self._leader_port)

    def url_of(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def start_controller_at(self, index: int) -> None:
        port = self.ports[index]
        self.procs[index] = self._spawn(
            ["-m", "corral.controller", "--listen", f"127.0.0.1:{port}", "--advertise-url", self.url_of(index),
             "--db", self.db, "--secret-file", str(self.secret_file), "--config", str(self.config_file)],
            f"controller-{index}.log")

    def start(self) -> StandbyCluster:
        for index in range(len(self.ports)):
            self.start_controller_at(index)
            wait_for(lambda i=index: self.status(i), 20, message=f"controller {index} answering")
        self.controller = self.procs[0]  # for the harness's health check
        self.relay.start()
        wait_for(lambda: self.leader() is not None, 10, message="a leader")
        self.start_agents()
        return self

    def status(self, index: int, timeout_s: float = 0.3) -> dict | None:
        try:
            reply = self.direct[index].get(f"{API}/status", timeout=timeout_s)
        except httpx.TransportError:
            return None
        return reply.json() if reply.status_code == 200 else None

    def leader(self) -> int | None:
        """The index of the controller that says it leads (the highest epoch, if two still think so)."""
        claims = [(status["epoch"], i) for i in range(len(self.ports))
                  if self.procs[i] is not None and (status := self.status(i)) and status["role"] == "leader"]
        return max(claims)[1] if claims else None

    def _leader_port(self) -> int | None:
        leader = self.leader()
        return None if leader is None else self.ports[leader]

    def signal(self, index: int, signum: int) -> None:
        os.killpg(self.procs[index].pid, signum)
        if signum == signal.SIGKILL:
            self.procs[index].wait()

    def log_of(self, index: int) -> str:
        return (self.root / f"controller-{index}.log").read_text()

    def stop(self) -> None:
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM until continued
        self.relay.stop()
        alive = [p for p in self.procs if p is not None and p is not self.controller]
        super().stop()
        for proc in alive:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for client in self.direct:
            client.close()
