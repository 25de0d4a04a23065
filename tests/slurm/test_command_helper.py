"""The user's command helper (corral.slurm.front, corral.slurm.helper): the same bytes and exit status as
the command run in its own process, nothing run twice or lost when the helper is gone, stale or of another
version, and nobody but its user served. Real processes, real Unix sockets, a real other user."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from corral.slurm import front

from .commands import command_env, script

HELPER_START_S = 20.0  # a fresh interpreter importing the commands, on a loaded machine


@pytest.fixture
def runtime_dir(tmp_path):
    """A private XDG_RUNTIME_DIR of the test's own; the helpers started there are ended afterwards."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    yield directory
    for lock in (directory / "corral").glob("*.lock") if (directory / "corral").exists() else ():
        sock = str(lock)[: -len(".lock")]
        for pid in _helper_pids(sock):
            with contextlib.suppress(ProcessLookupError):  # its waiting child goes with the helper
                os.kill(pid, 15)


ACCEPTING = "00010000"  # /proc/net/unix's flag of a listening socket (__SO_ACCEPTCON)


def _listening(path: str) -> bool:
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[3] == ACCEPTING and fields[7] == path:
            return True
    return False


def _helper_pids(sock: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"corral.slurm.helper" in args and sock.encode() in args:
                found.append(int(entry.name))
    return found


def _wait_for_helper(path: str) -> None:
    """Until a socket listens at `path`, seen in /proc/net/unix: a probe connecting to it would be taken by the
    helper's waiting child as a call, which could then meet a change the test makes next (a stale test would
    see its helper end before the call it means to make)."""
    deadline = time.monotonic() + HELPER_START_S
    while time.monotonic() < deadline:
        if _listening(path):
            return
        time.sleep(0.05)
    raise AssertionError(f"no helper on {path} after {HELPER_START_S} s")


def _env(slurm_cluster, runtime_dir, **extra):
    return command_env(slurm_cluster.url, slurm_cluster.secret_file, XDG_RUNTIME_DIR=str(runtime_dir),
                       **{front.HELPER_SWITCH: "1"}, **extra)


def _call(name, *args, env, stdin=None, cwd=None):
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    return subprocess.run([str(script(name)), *args], env=env, capture_output=True, text=True, timeout=60,
                          cwd=cwd, check=False, **feed)


def _started_helper(env) -> str:
    """Start the helper through a first call, wait until it serves; its socket's path."""
    path = front.socket_path(env)
    _call("squeue", "--version", env=env)
    _wait_for_helper(path)
    return path


@pytest.mark.slow
def test_the_helper_answers_as_the_command_itself(slurm_cluster, runtime_dir, tmp_path):
    env = _env(slurm_cluster, runtime_dir)
    path = _started_helper(env)
    alone = {**env, front.HELPER_SWITCH: "0"}
    workdir = tmp_path / "work"
    workdir.mkdir()
    # sbatch from stdin, in the caller's directory, with the caller's environment.
    script_text = "#!/bin/sh\n#SBATCH --job-name=viahelper\n#SBATCH --hold\ntrue\n"
    submitted = _call("sbatch", "--parsable", env=env, stdin=script_text, cwd=workdir)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.isdigit()
    for args in (["-j", job_id, "-o", "%i %j %t %Z"], ["-h", "-j", job_id], ["--bogus"], ["-j", "x"]):
        via, own = _call("squeue", *args, env=env), _call("squeue", *args, env=alone)
        assert (via.stdout, via.stderr, via.returncode) == (own.stdout, own.stderr, own.returncode)
    shown = _call("squeue", "-h", "-j", job_id, "-o", "%j %Z", env=env).stdout.split()
    assert shown == ["viahelper", str(workdir)]
    via = _call("sacct", "-j", job_id, "-n", "-o", "JobName%20", env=env)
    assert via.stdout.strip() == "viahelper"
    cancelled = _call("scancel", job_id, env=env)
    assert cancelled.returncode == 0, cancelled.stderr
    assert _call("scancel", "--bogus", env=env).returncode == _call("scancel", "--bogus", env=alone).returncode
    assert _helper_pids(path)  # the calls above went through it


@pytest.mark.slow
def test_a_stale_socket_is_replaced_and_the_call_runs_here(slurm_cluster, runtime_dir):
    env = _env(slurm_cluster, runtime_dir)
    path = front.socket_path(env)
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(path)  # bound and never listening: what a killed helper leaves
    dead.close()
    result = _call("squeue", "-h", "-j", "1", env=env)
    assert result.returncode in (0, 1) and "Traceback" not in result.stderr  # ran in its own process
    _wait_for_helper(path)  # and a helper took the socket over
    assert _helper_pids(path)


def test_another_user_cannot_use_the_helper(tmp_path):
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make another user")
    name = "corral-leanclient-other"
    subprocess.run(["userdel", name], capture_output=True, check=False)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    directory = Path(tempfile.mkdtemp(prefix="corral-leanclient-"))  # the test's basetemp is root's alone
    directory.chmod(0o755)
    path = str(directory / "helper.sock")
    helper = subprocess.Popen([sys.executable, "-m", "corral.slurm.helper", path], env={**os.environ})
    try:
        _wait_for_helper(path)
        assert os.stat(path).st_mode & 0o777 == 0o700  # the socket is its user's alone
        os.chmod(path, 0o777)  # even when anyone may connect, the helper checks who did
        payload = front.request("squeue", ["--version"], {"X": "1"})
        call = len(payload).to_bytes(front.HEADER_BYTES, "big") + payload
        probe = (  # the system's python, importing nothing of corral's: the other user's own client
            "import socket, sys\n"
            f"s = socket.socket(socket.AF_UNIX); s.connect({path!r})\n"
            "fds = b''.join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, 0))\n"
            "try:\n"
            f"    s.sendmsg([bytes.fromhex({call.hex()!r})], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])\n"
            "    print('ANSWER', s.recv(1), s.recv(4))\n"
            "except OSError as exc:\n"
            "    print('ANSWER', type(exc).__name__)\n"
        )
        out = subprocess.run(["runuser", "-u", name, "--", "/usr/bin/python3", "-c", probe], capture_output=True,
                             text=True, timeout=30)
        assert out.stdout.startswith("ANSWER"), out.stderr
        assert out.stdout.strip() in ("ANSWER b'' b''", "ANSWER ConnectionResetError", "ANSWER BrokenPipeError")
        # The user's own private directory keeps others from even reaching the socket.
        own = front.private_directory({"XDG_RUNTIME_DIR": str(tmp_path / "nowhere")})
        assert own is not None and os.stat(own).st_mode & 0o777 == 0o700
    finally:
        helper.terminate()
        helper.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True, check=False)


def test_a_directory_open_to_others_or_not_the_users_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (shared / "corral").mkdir()
    (shared / "corral").chmod(0o777)
    assert front._private(str(shared / "corral"), os.getuid()) is False
    link = tmp_path / "link"
    link.symlink_to(shared)
    assert front._private(str(link), os.getuid()) is False
    assert front._private(str(shared), os.getuid() + 1) is False


@contextlib.contextmanager
def helper_importing(tmp_path: Path, probe: str):
    """A real helper whose Python has also imported the package `probe` (an empty one under tmp_path/pkg):
    yields (the helper, its socket's path, the package's folder); killed at the end if it still runs."""
    package = tmp_path / "pkg" / probe
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").touch()
    path = str(tmp_path / "helper.sock")
    code = f"import sys, {probe}\nfrom corral.slurm import helper\nhelper.serve({path!r})\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "pkg"), *sys.path])}
    helper = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        _wait_for_helper(path)
        yield helper, path, package
    finally:
        if helper.poll() is None:
            helper.kill()


def test_a_helper_of_an_older_corral_answers_stale_and_ends(tmp_path):
    """A module of corral's that changed on disk after the helper started (an upgrade) makes it stale."""
    with helper_importing(tmp_path, "corral_leanclient_probe") as (helper, path, package):
        os.utime(package / "__init__.py", ns=(time.time_ns(), time.time_ns() + 10**9))
        assert front.call_helper(path, "squeue", ["--version"], {}) is None  # the caller runs it itself
        assert helper.wait(10) == 0
        assert not os.path.exists(path)


def test_a_helper_ended_by_sigterm_removes_its_socket_and_its_waiting_child(tmp_path):
    path = str(tmp_path / "helper.sock")
    helper = subprocess.Popen([sys.executable, "-m", "corral.slurm.helper", path])
    try:
        _wait_for_helper(path)
        deadline = time.monotonic() + HELPER_START_S
        while len(pids := _helper_pids(path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(pids) == 2  # it and the child it keeps waiting for the next call
        helper.terminate()
        assert helper.wait(10) == 0
        assert not os.path.exists(path)
        deadline = time.monotonic() + 10
        while _helper_pids(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _helper_pids(path)
    finally:
        if helper.poll() is None:
            helper.kill()


class ScriptedHelper:
    """A stand-in at the socket's path that acknowledges (or not) and then closes: a helper that dies."""

    def __init__(self, path: str, acknowledge: bool) -> None:
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(path)
        self.server.listen(1)
        self.acknowledge = acknowledge
        self.calls = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        with conn:
            _, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
            for fd in fds:  # the caller's stdin, stdout, stderr, directory: held, its reader would wait
                os.close(fd)
            self.calls += 1
            if self.acknowledge:
                conn.sendall(front.ACCEPTED)


def test_a_helper_that_dies_after_taking_a_call_is_an_error_never_a_second_run(tmp_path, capfd):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime), "PATH": os.environ.get("PATH", ""), front.HELPER_SWITCH: "1"}
    stand_in = ScriptedHelper(front.socket_path(env), acknowledge=True)
    status = front.through_helper("sbatch", ["--wrap", "true"], env)
    stand_in.thread.join(5)
    assert status == 1 and stand_in.calls == 1
    assert "helper ended before sbatch finished; it may have acted" in capfd.readouterr().err


def test_a_helper_that_dies_before_taking_a_call_leaves_it_to_run_here(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    env = {"XDG_RUNTIME_DIR": str(runtime), "PATH": os.environ.get("PATH", ""), front.HELPER_SWITCH: "1"}
    stand_in = ScriptedHelper(front.socket_path(env), acknowledge=False)
    assert front.through_helper("sbatch", ["--wrap", "true"], env) is None
    stand_in.thread.join(5)


def test_no_helper_with_the_switch_off_nor_inside_a_job(tmp_path):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    on = {front.HELPER_SWITCH: "1"}
    for extra in ({front.HELPER_SWITCH: "0"}, {**on, "SLURM_JOB_ID": "5"}, {**on, "CORRAL_JOB_ID": "5"}):
        env = {"XDG_RUNTIME_DIR": str(runtime), **extra}
        assert not front.helper_wanted(env)
        assert front.through_helper("squeue", [], env) is None
    assert not (runtime / "corral").exists()  # not even looked for
    assert front.helper_wanted({}) and front.helper_wanted(on)  # on unless switched off


def test_the_front_end_imports_nothing_but_itself():
    code = "import sys\nbefore = set(sys.modules)\nimport corral.slurm.front\nprint(sorted(set(sys.modules) - before))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['_socket', 'corral', 'corral.slurm', 'corral.slurm.front']"
