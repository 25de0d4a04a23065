"""Checks (agent/checks.py): HTTP GET, TCP connect and programs against real servers and real processes,
each bounded by its timeout; a program run "inside a job" runs as the job's user in the job's cgroup."""
from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from corral.agent.checks import AgentLauncher, CheckResult, ExecCheck, HttpCheck, TaskContext, TaskLauncher, TcpCheck
from corral.agent.runner import JobRunner
from corral.agent.tasks import Confinement
from corral.protocol import NodeStarted
from tests.agent.test_confinement import cgroup_tree, gpu_files, shared_dir  # noqa: F401 - fixtures


@pytest.fixture
def probe_user() -> Iterator[pwd.struct_passwd]:
    name = f"crlprobes{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-d", f"/home/{name}", "-s", "/bin/sh", name], check=True)
    yield pwd.getpwnam(name)
    subprocess.run(["userdel", "--force", name], check=False)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/hang":
            self.server.release.wait(10)  # type: ignore[attr-defined]
        status = int(self.path.strip("/")) if self.path.strip("/").isdigit() else 200
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@pytest.fixture
def http_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.release.set()  # type: ignore[attr-defined]
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def http_check(url: str, timeout_s: float = 2.0) -> CheckResult:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await HttpCheck(url, timeout_s, client).check()


def test_an_http_check_passes_on_2xx_and_3xx_and_says_the_status_otherwise(http_server):
    assert asyncio.run(http_check(f"{http_server}/")) == CheckResult(True, "HTTP 200")
    assert asyncio.run(http_check(f"{http_server}/302")) == CheckResult(True, "HTTP 302")
    assert asyncio.run(http_check(f"{http_server}/500")) == CheckResult(False, "HTTP 500")
    assert asyncio.run(http_check(f"{http_server}/503")) == CheckResult(False, "HTTP 503")


def test_an_http_check_says_connection_refused_and_timed_out(http_server):
    assert asyncio.run(http_check(f"http://127.0.0.1:{closed_port()}/")) == CheckResult(False, "connection refused")
    assert asyncio.run(http_check(f"{http_server}/hang", 0.3)) == CheckResult(False, "timed out after 0.3 s")


def test_a_tcp_check_connects_or_says_why_not():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert asyncio.run(TcpCheck("127.0.0.1", port, 1).check()) == CheckResult(True, f"connected to port {port}")
    assert asyncio.run(TcpCheck("127.0.0.1", closed_port(), 1).check()) == CheckResult(False, "connection refused")


def test_a_tcp_check_times_out_on_a_listener_that_takes_no_more_connections():
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # never accepted: once its queue is full, further SYNs are dropped
        port = listener.getsockname()[1]
        for _ in range(4):  # fill the queue
            filler = stack.enter_context(socket.socket())
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        assert asyncio.run(TcpCheck("127.0.0.1", port, 0.3).check()) == CheckResult(False, "timed out after 0.3 s")


def agent_program(argv: list[str], timeout_s: float = 5.0) -> CheckResult:
    return asyncio.run(ExecCheck(argv, timeout_s, AgentLauncher({"PATH": os.environ["PATH"]})).check())


def test_a_program_check_passes_on_exit_0_and_names_the_exit_and_first_line_of_stderr():
    assert agent_program(["true"]) == CheckResult(True, "exit 0")
    assert agent_program(["sh", "-c", "echo fine; echo 'disk full' >&2; echo more >&2; exit 3"]) == \
        CheckResult(False, "exit 3: disk full")
    assert agent_program(["sh", "-c", "echo 'only stdout'; exit 1"]) == CheckResult(False, "exit 1: only stdout")
    assert agent_program(["sh", "-c", "kill -9 $$"]) == CheckResult(False, "killed by signal 9")
    assert agent_program(["/nonexistent/probe"]).detail == "cannot run /nonexistent/probe: No such file or directory"


def test_a_program_that_overruns_is_killed_with_what_it_started(tmp_path):
    pids = tmp_path / "pids"
    result = agent_program(["sh", "-c", f"sleep 60 & echo $! > {pids}; sleep 60"], timeout_s=0.3)
    assert result == CheckResult(False, "timed out after 0.3 s")
    child = int(pids.read_text())
    assert _gone(child), "its background child dies with it (its process group is SIGKILLed)"


def test_a_chatty_program_does_not_block_on_a_full_pipe():
    result = agent_program(["sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo bad >&2; exit 2"])
    assert result == CheckResult(False, "exit 2: bad")


def _gone(pid: int, within_s: float = 2.0) -> bool:
    async def wait() -> bool:
        for _ in range(int(within_s / 0.02)):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
            await asyncio.sleep(0.02)
        return False

    return asyncio.run(wait())


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_an_exec_check_inside_a_job_runs_as_its_user_in_its_cgroup(probe_user, request, make_launch, agent_env,
                                                                   tmp_path):
    user = probe_user
    tree, shared = request.getfixturevalue("cgroup_tree"), request.getfixturevalue("shared_dir")
    workdir = shared / user.pw_name
    workdir.mkdir(mode=0o700)
    os.chown(workdir, user.pw_uid, user.pw_gid)
    launch = make_launch(job_id=41, user=user.pw_name, uid=user.pw_uid, workdir=str(workdir),
                         argv=["sleep", "30"], output=str(workdir / "out"))
    runner = JobRunner(launch, node_name="n1", spool_dir=tmp_path / "spool", base_env=agent_env,
                       confinement=Confinement(run_as_user=True, cgroups=tree))
    seen = workdir / "seen"

    async def scenario() -> CheckResult:
        events = runner.run()
        assert isinstance(await anext(events), NodeStarted)
        context = TaskContext(runner.identity, tuple(runner.cgroup_leaves()), launch.workdir, agent_env)
        check = ExecCheck(["sh", "-c", f"id -un > {seen}; cat /proc/self/cgroup >> {seen}; "
                                       "echo 'not ready yet' >&2; exit 3"], 5, TaskLauncher(lambda: context,
                                                                                         tmp_path / "probes"))
        result = await check.check()
        await runner.kill(9, 1)
        async for _ in events:
            pass
        return result

    assert asyncio.run(scenario()) == CheckResult(False, "exit 3: not ready yet")
    who, *cgroups = seen.read_text().splitlines()
    assert who == user.pw_name
    unified = [line for line in cgroups if line.startswith("0::")]  # the cgroup2 hierarchy's line
    assert unified and unified[0].endswith("/job_41/batch"), cgroups
    assert not list((tmp_path / "probes").glob("*.exit")), "the probe's leader left no exit record behind"
