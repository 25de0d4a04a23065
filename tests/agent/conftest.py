"""Fixtures for the agent tests: a LaunchJob builder and a tiny real HTTP controller on 127.0.0.1."""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import psutil
import pytest

from corral.agent.agent import Agent
from corral.agent.discovery import discover
from corral.protocol import (
    API_PREFIX,
    EPOCH_HEADER,
    CommandBatch,
    EventBatch,
    LaunchJob,
    LaunchStep,
    NodeFinished,
    NodeStarted,
    Registration,
    RegistrationReply,
    TaskLaunch,
)

SECRET = "test-secret"


def build_launch(workdir: Path | str, **overrides: Any) -> LaunchJob:
    """A one-node, one-task job running `true`; override any field."""
    fields: dict[str, Any] = dict(
        job_id=7,
        job_name="test",
        user="alice",
        uid=1000,
        partition="gpu",
        node_index=0,
        nodes=["n1"],
        master_addr="n1",
        master_port=29500,
        tasks_per_node=1,
        num_tasks=1,
        cpus_per_task=1,
        cpus_on_node=1,
        mem_per_node_mib=0,
        node_gpus=[],
        tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[])],
        argv=["true"],
        workdir=str(workdir),
        output="slurm-%j.out",
        time_limit_s=60,
    )
    fields.update(overrides)
    return LaunchJob(**fields)


def build_step(workdir: Path | str, **overrides: Any) -> LaunchStep:
    """Step 0 of job 7: one node (n1), one task running `true`, no srun listening; override any field."""
    fields: dict[str, Any] = dict(
        job_id=7,
        step_id=0,
        step_name="true",
        job_name="test",
        user="alice",
        uid=1000,
        partition="gpu",
        job_nodes=["n1"],
        cpus_on_node=1,
        node_gpus=[],
        time_limit_s=60,
        step_nodes=["n1"],
        node_index=0,
        tasks_per_node=[1],
        num_tasks=1,
        tasks=[TaskLaunch(rank=0, local_rank=0, gpus=[])],
        argv=["true"],
        workdir=str(workdir),
    )
    fields.update(overrides)
    return LaunchStep(**fields)


@pytest.fixture
def make_step(tmp_path: Path) -> Callable[..., LaunchStep]:
    def make(**overrides: Any) -> LaunchStep:
        return build_step(overrides.pop("workdir", tmp_path), **overrides)

    return make


@pytest.fixture
def make_launch(tmp_path: Path) -> Callable[..., LaunchJob]:
    def make(**overrides: Any) -> LaunchJob:
        return build_launch(overrides.pop("workdir", tmp_path), **overrides)

    return make


class FakeController:
    """Just enough of the controller's agent API, over real HTTP, with knobs for failure scenarios."""

    def __init__(self) -> None:
        self.epoch = "epoch-1"
        self.leader_epoch = 0  # the lease epoch its replies carry
        self.heartbeat_s = 0.5
        self.fence_after_s: float | None = None  # RegistrationReply's: self-fencing (decision 0017)
        self.kill_jobs: list[int] = []
        self.registrations: list[Registration] = []
        self.on_register: Callable[[Registration], None] | None = None  # runs before the reply
        self.auth_headers: list[str] = []
        self.polls: list[tuple[int, str]] = []  # (after, epoch header)
        self.events: list[Any] = []
        self.event_batches: list[list[str]] = []  # the kinds of each batch of events accepted, in order
        self.commands: list[Any] = []
        self.max_events_bytes: int | None = None  # a larger event batch gets 413, as [http] max_agent_body_mib
        self.cond = threading.Condition()
        # A standby under the HA contract (issue 13): every request answered 421 naming `leader`, if known.
        self.standby = False
        self.leader: str | None = None
        self.generation = 0
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.controller = self  # type: ignore[attr-defined]
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Become unreachable: stop accepting and close the listening socket."""
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        self._server = None
        with self.cond:
            self.generation += 1  # ends the long polls in flight
            self.cond.notify_all()

    def restart(self, epoch: str) -> None:
        """What a controller restart looks like to agents: a new epoch and a fresh command queue."""
        with self.cond:
            self.epoch = epoch
            self.commands = []
            self.cond.notify_all()

    async def until(self, predicate: Callable[[], Any], timeout_s: float = 3.0) -> Any:
        """Wait (without blocking the event loop) until `predicate()` is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s}s")
            await asyncio.sleep(0.02)
        return value

    def wait(self, predicate: Callable[[], Any], timeout_s: float = 3.0) -> Any:
        """`until` for tests without an event loop."""
        deadline = time.monotonic() + timeout_s
        while not (value := predicate()):
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout_s}s")
            time.sleep(0.02)
        return value

    def send(self, command: Any) -> Any:
        with self.cond:
            command = command.model_copy(update={"seq": len(self.commands) + 1})
            self.commands.append(command)
            self.cond.notify_all()
        return command

    def events_of(self, kind: type, job_id: int) -> list[Any]:
        return [e for e in list(self.events) if isinstance(e, kind) and e.job_id == job_id]

    def finished(self, job_id: int) -> NodeFinished | None:
        found = self.events_of(NodeFinished, job_id)
        return found[-1] if found else None

    def started(self, job_id: int) -> NodeStarted | None:
        found = self.events_of(NodeStarted, job_id)
        return found[-1] if found else None


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # An agent cancelled mid-poll closes its connection: expected here, not worth a traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    @property
    def controller(self) -> FakeController:
        return self.server.controller

    def _reply(self, status: int, body: str = "{}") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def _refused_as_standby(self) -> bool:
        ctl = self.controller
        if not ctl.standby:
            return False
        self._body()
        data = json.dumps({"detail": f"not the leader: the leader is {ctl.leader}", "leader": ctl.leader}).encode()
        self.send_response(421)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if ctl.leader:
            self.send_header("X-Corral-Leader", ctl.leader)
        self.end_headers()
        self.wfile.write(data)
        return True

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        if self._refused_as_standby():
            return
        if self.headers.get("Authorization") != f"Bearer {SECRET}":
            self._reply(401, json.dumps({"detail": "bad secret"}))
        elif path == f"{API_PREFIX}/agents/register":
            self._register()
        elif path.endswith("/events"):
            self._events()
        else:
            self._reply(404)

    def _register(self) -> None:
        ctl = self.controller
        registration = Registration.model_validate_json(self._body())
        if ctl.on_register is not None:
            ctl.on_register(registration)
        with ctl.cond:
            ctl.registrations.append(registration)
            ctl.auth_headers.append(self.headers["Authorization"])
            reply = RegistrationReply(epoch=ctl.epoch, heartbeat_s=ctl.heartbeat_s, kill_jobs=ctl.kill_jobs,
                                      leader_epoch=ctl.leader_epoch, fence_after_s=ctl.fence_after_s)
        self._reply(200, reply.model_dump_json())

    def _events(self) -> None:
        ctl = self.controller
        body = self._body()
        if ctl.max_events_bytes is not None and len(body) > ctl.max_events_bytes:
            self._reply(413, json.dumps({"detail": "the request body is over this route's limit"}))
            return
        batch = EventBatch.model_validate_json(body)
        with ctl.cond:
            if self.headers.get(EPOCH_HEADER) != ctl.epoch:
                self._reply(409, json.dumps({"detail": "epoch changed"}))
                return
            ctl.events.extend(batch.events)
            ctl.event_batches.append([type(event).__name__ for event in batch.events])
        self._reply(200)

    def do_GET(self) -> None:  # noqa: N802
        ctl = self.controller
        if self._refused_as_standby():
            return
        query = parse_qs(urlsplit(self.path).query)
        after = int(query["after"][0])
        wait_s = min(float(query["wait_s"][0]), 2.0)
        with ctl.cond:
            epoch = self.headers.get(EPOCH_HEADER, "")
            ctl.polls.append((after, epoch))
            if epoch != ctl.epoch:
                self._reply(409, json.dumps({"detail": "epoch changed"}))
                return
            generation = ctl.generation
            ctl.cond.wait_for(
                lambda: any(c.seq > after for c in ctl.commands) or ctl.generation != generation,
                timeout=wait_s,
            )
            pending = [c for c in ctl.commands if c.seq > after]
        self._reply(200, CommandBatch(commands=pending, leader_epoch=ctl.leader_epoch).model_dump_json())


def _is_dead(pid: int, within_s: float = 2.0) -> bool:
    """Whether `pid` is gone (or a zombie nobody reaped) within `within_s`: signal delivery is not
    instantaneous, and orphans are not always reaped promptly in containers."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)


@pytest.fixture
def is_dead() -> Callable[..., bool]:
    return _is_dead


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    ctl.start()
    yield ctl
    if ctl._server is not None:
        ctl.stop()


@pytest.fixture
def run_with_agent(controller, tmp_path, agent_env):
    """Run `scenario(agent)` while an Agent for node n1 talks to the fake controller."""

    def run(scenario: Callable[[Agent], Awaitable[None]], secret: str = SECRET, **options: Any) -> Agent:
        """`options`: more of the Agent's keyword arguments (an `inventory` replaces the simulated one)."""
        agent = Agent(
            controller_url=controller.url,
            secret=secret,
            node="n1",
            inventory=options.pop("inventory", None) or discover(2, cpus=4, mem_mib=4096),
            spool_dir=tmp_path / "spool",
            base_env=agent_env,
            **options,
        )

        async def main() -> None:
            agent_task = asyncio.create_task(agent.run())
            try:
                await scenario(agent)
            finally:
                agent_task.cancel()
                await asyncio.gather(agent_task, return_exceptions=True)

        asyncio.run(main())
        return agent

    return run


@pytest.fixture
def agent_env() -> dict[str, str]:
    """A minimal environment for tasks started by tests (no inherited SLURM_*, predictable PATH)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp")}


@pytest.fixture
def agent_process_with_a_task(controller, make_launch, tmp_path):
    """A real agent process (`python -m corral.agent`, with extra arguments) running one task of job 31:
    yields (agent, the task's pid). Afterwards the agent is gone and so is the task."""

    @contextlib.contextmanager
    def start(*extra_args: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
        secret_file = tmp_path / "secret"
        secret_file.write_text("test-secret\n")
        agent = subprocess.Popen(
            [sys.executable, "-m", "corral.agent", "--controller", controller.url, "--secret-file", str(secret_file),
             "--node", "n1", "--gpus", "2", "--cpus", "2", "--mem-mib", "1024", "--spool", str(tmp_path / "spool"),
             "--tasks-as-agent-user", "--no-cgroups", *extra_args],  # the builders' user is made up
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        task_pid = None
        try:
            controller.wait(lambda: controller.polls, timeout_s=10)
            controller.send(make_launch(job_id=31, argv=["sleep", "30"]))
            (started,) = controller.wait(lambda: controller.events_of(NodeStarted, 31))
            task_pid = started.pids[0]
            yield agent, task_pid
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
            assert agent.stderr is not None
            agent.stderr.close()
            if task_pid is not None and not _is_dead(task_pid, within_s=0):
                os.killpg(task_pid, signal.SIGKILL)

    return start
