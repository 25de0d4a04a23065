"""The native front-end of sbatch, squeue, sacct, scancel and corral (src/corral/slurm/front.c, installed by
corral.slurm.build_front): it finds the helper corral.slurm.front would (the same socket name), passes the call
with the same protocol, exits with the command's status, leaves a call the helper did not take to the Python
entry point exactly once, never runs a taken call twice, talks to no other user's helper, and ends the call
on Ctrl-C. Real processes, the real helper, real Unix sockets and a real other user.

Each test compiles its own front-end whose entry points are small scripts that note each fallback in a file
and then run the real Python entry point, so a test sees whether (and how often) a call fell back."""
from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from corral.slurm import build_front, front

from .commands import command_env, script
from .test_command_helper import ScriptedHelper, _helper_pids, _wait_for_helper

ENTRY = {  # the real Python entry points, as pip's console scripts call them
    **{name: f"import sys; from corral.slurm.front import run; sys.exit(run({name!r}))" for name in front.COMMANDS},
    front.CORRAL: "from corral.cli.main import main; main()",
}


class Front:
    """A compiled front-end in `bin/` (one link per command) whose entry points note each fallback."""

    def __init__(self, root: Path) -> None:
        self.bin, entry_points, self.fallbacks = root / "bin", root / "entry", root / "fallbacks"
        self.bin.mkdir()
        entry_points.mkdir()
        binary = build_front.compile_front(self.bin / "front", entry_points)
        for command, code in ENTRY.items():
            (self.bin / command).symlink_to(binary)
            entry = entry_points / command
            entry.write_text(f"#!/bin/sh\necho {command}:${{{front.FALLBACK_MARK}:-unmarked}} >> {self.fallbacks}\n"
                             f"exec {sys.executable} -c {_quoted(code)} \"$@\"\n")
            entry.chmod(0o755)

    def run(self, command: str, *args: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run([str(self.bin / command), *args], env=env, capture_output=True, text=True,
                              timeout=60, check=False, **kwargs)

    def fallback_count(self) -> int:
        return len(self.fallback_marks())

    def fallback_marks(self) -> list[str]:
        """Per fallback, `command:mark`: what the front-end told the entry point it found."""
        return self.fallbacks.read_text().split() if self.fallbacks.exists() else []


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.fixture
def native(tmp_path) -> Front:
    return Front(tmp_path)


@pytest.fixture
def runtime_dir(tmp_path):
    """A private XDG_RUNTIME_DIR; the helpers started there are ended afterwards."""
    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    yield directory
    helpers = directory / "corral"
    for lock in helpers.glob("*.lock") if helpers.exists() else ():
        for pid in _helper_pids(str(lock)[: -len(".lock")]):
            with contextlib.suppress(ProcessLookupError):  # its waiting child goes with the helper
                os.kill(pid, signal.SIGTERM)


def _plain_env(runtime_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "SLURM_", "SBATCH_", "SQUEUE_"))}
    return {**env, "XDG_RUNTIME_DIR": str(runtime_dir), **extra}


def test_without_a_helper_the_call_falls_back_once_and_starts_one(native, runtime_dir):
    env = _plain_env(runtime_dir)
    first = native.run("squeue", "--version", env=env)
    assert first.returncode == 0 and first.stdout.startswith("slurm"), first.stderr
    assert native.fallback_marks() == [f"squeue:{front.ABSENT}"]
    path = front.socket_path(env)  # the socket the Python side started a helper on: the front-end's own
    _wait_for_helper(path)
    second = native.run("squeue", "--version", env=env)
    assert (second.stdout, second.stderr, second.returncode) == (first.stdout, first.stderr, 0)
    assert native.fallback_count() == 1  # answered by the helper, no interpreter started
    assert _helper_pids(path)


def test_a_caller_without_a_locale_is_served_by_the_helper_it_started(native, runtime_dir):
    """No LANG nor LC_*: Python coerces the C locale (LC_CTYPE=C.UTF-8 in its own environment) where the
    front-end sees none; both must still name the same socket, or every such call (cron, `env -i`) starts
    Python."""
    env = {k: v for k, v in _plain_env(runtime_dir).items() if k != "LANG" and not k.startswith("LC_")}
    first = native.run("squeue", "--version", env=env)
    assert first.returncode == 0, first.stderr
    _wait_for_helper(front.socket_path(env))  # the front-end's name for it: no LC_CTYPE
    for _ in range(3):
        again = native.run("squeue", "--version", env=env)
        assert (again.stdout, again.returncode) == (first.stdout, 0)
    assert native.fallback_marks() == [f"squeue:{front.ABSENT}"]  # only the first call started Python


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a network namespace needs root")
def test_a_call_from_another_network_namespace_is_not_served_by_this_ones_helper(native, runtime_dir):
    """`ip netns exec` (a virtual host) reaches other addresses: the helper outside must not run its calls."""
    env = _plain_env(runtime_dir)
    native.run("squeue", "--version", env=env)
    _wait_for_helper(front.socket_path(env))
    inside = subprocess.run(["unshare", "--net", str(native.bin / "squeue"), "--version"], env=env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert inside.returncode == 0, inside.stderr
    assert native.fallback_marks()[-1] == f"squeue:{front.ABSENT}", "served by the outside helper"
    code = "import os; from corral.slurm import front; print(front.socket_path(dict(os.environ)))"
    in_namespace = subprocess.run(["unshare", "--net", sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, timeout=60, check=True).stdout.strip()
    assert in_namespace != front.socket_path(env)


def test_exit_status_and_stderr_come_back_from_the_helper(native, runtime_dir):
    env = _plain_env(runtime_dir)
    native.run("squeue", "--version", env=env)
    _wait_for_helper(front.socket_path(env))
    helped = native.run("squeue", "--bogus-option", env=env)
    alone = native.run("squeue", "--bogus-option", env={**env, front.HELPER_SWITCH: "0"})
    assert helped.returncode == alone.returncode != 0
    assert (helped.stdout, helped.stderr) == (alone.stdout, alone.stderr) and "bogus" in helped.stderr
    assert native.fallback_count() == 2  # the first call and the one with the switch off


def test_the_request_is_the_python_front_ends_byte_for_byte(native, runtime_dir, tmp_path):
    """A stand-in at the helper's socket records what it gets: argv, umask, the environment, and the four
    descriptors (the caller's stdin, stdout, stderr and working directory); its status is the exit status."""
    env = _plain_env(runtime_dir, ODD="a b\tc=d", EMPTY="")
    path = front.socket_path(env)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    got: dict = {}

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
            got["payload"] = data[front.HEADER_BYTES:]
            got["length"] = int.from_bytes(data[:front.HEADER_BYTES], "big")
            got["cwd"] = os.readlink(f"/proc/self/fd/{fds[3]}")
            os.write(fds[1], b"to stdout\n")
            os.write(fds[2], b"to stderr\n")
            got["stdin"] = os.read(fds[0], 100)
            for fd in fds:
                os.close(fd)
            conn.sendall(front.ACCEPTED + (300).to_bytes(4, "big", signed=True))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    workdir = tmp_path / "work dir"
    workdir.mkdir()
    args = ["--parsable", "-J", "x y", ""]
    result = subprocess.run([str(native.bin / "sbatch"), *args], env=env, input="the script", capture_output=True,
                            text=True, cwd=workdir, timeout=30, preexec_fn=lambda: os.umask(0o027))
    thread.join(10)
    server.close()
    assert result.returncode == 300 & 0xFF  # as sys.exit(300) would leave it
    assert (result.stdout, result.stderr) == ("to stdout\n", "to stderr\n")
    assert got["stdin"] == b"the script" and got["cwd"] == str(workdir)
    assert got["length"] == len(got["payload"])
    fields = got["payload"].split(b"\0")
    assert fields[:5] == [front.PROTOCOL, b"sbatch", str(native.bin / "sbatch").encode(), b"%d" % 0o027, b"4"]
    assert [f.decode() for f in fields[5:9]] == args
    sent_env = dict(item.decode().partition("=")[::2] for item in fields[9:])
    assert sent_env == env
    assert native.fallback_count() == 0


def test_a_helper_that_ends_after_taking_the_call_is_an_error_never_a_second_run(native, runtime_dir):
    env = _plain_env(runtime_dir)
    stand_in = ScriptedHelper(front.socket_path(env), acknowledge=True)
    result = native.run("sbatch", "--wrap", "true", env=env)
    stand_in.thread.join(5)
    assert result.returncode == 1 and stand_in.calls == 1
    assert "helper ended before sbatch finished; it may have acted" in result.stderr
    assert native.fallback_count() == 0


def test_a_helper_that_ends_before_taking_the_call_leaves_it_to_python(native, runtime_dir):
    env = _plain_env(runtime_dir)
    stand_in = ScriptedHelper(front.socket_path(env), acknowledge=False)
    result = native.run("squeue", "--version", env=env)
    stand_in.thread.join(5)
    assert result.returncode == 0 and result.stdout.startswith("slurm")
    assert native.fallback_marks() == [f"squeue:{front.REFUSED}"]  # and not asked a second time
    assert stand_in.calls == 1


def test_the_fallback_mark_is_taken_out_before_the_command_runs(monkeypatch, capsys):
    monkeypatch.setenv(front.FALLBACK_MARK, front.REFUSED)
    assert front.run("squeue", ["--version"]) == 0
    assert capsys.readouterr().out.startswith("slurm")
    assert front.FALLBACK_MARK not in os.environ  # a job submitted by this call would not see it


def test_a_stale_helper_answers_stale_and_the_call_falls_back(native, runtime_dir, tmp_path):
    """A corral module changed on disk after the helper started (an upgrade): the helper says so and ends, the
    call runs in its own interpreter, once."""
    package = tmp_path / "pkg" / "corral_cmdfast_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    env = _plain_env(runtime_dir, PYTHONPATH=os.pathsep.join([str(tmp_path / "pkg"), *sys.path]))
    path = front.socket_path(env)
    code = f"import corral_cmdfast_probe\nfrom corral.slurm import helper\nhelper.serve({path!r})\n"
    helper = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        _wait_for_helper(path)
        os.utime(package / "__init__.py", ns=(time.time_ns(), time.time_ns() + 10**9))
        result = native.run("squeue", "--version", env=env)
        assert result.returncode == 0 and result.stdout.startswith("slurm"), result.stderr
        assert native.fallback_marks() == [f"squeue:{front.REFUSED}"]
        assert helper.wait(10) == 0
    finally:
        if helper.poll() is None:
            helper.kill()


def test_no_helper_with_the_switch_off_inside_a_job_or_for_other_corral_commands(native, runtime_dir):
    for extra in ({front.HELPER_SWITCH: "0"}, {"SLURM_JOB_ID": "5"}, {"CORRAL_JOB_ID": "5"}):
        result = native.run("squeue", "--version", env=_plain_env(runtime_dir, **extra))
        assert result.returncode == 0, result.stderr
    assert not (runtime_dir / "corral").exists()  # not even looked for
    version = native.run("corral", "--version", env=_plain_env(runtime_dir))
    assert version.returncode == 0 and version.stdout.startswith("corral ")
    assert native.fallback_marks() == ["squeue:unmarked"] * 3 + ["corral:unmarked"]
    assert not (runtime_dir / "corral").exists()


def test_another_users_socket_gets_nothing_and_the_call_runs_here(native, runtime_dir):
    """A socket at the helper's path served by another user (a planted one): the front-end checks who
    serves it before sending anything, and runs the call in its own interpreter."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to make another user")
    name = "corral-cmdfast-other"
    subprocess.run(["userdel", name], capture_output=True, check=False)
    subprocess.run(["useradd", "-M", "-s", "/bin/sh", name], check=True)
    shared = Path(tempfile.mkdtemp(prefix="corral-cmdfast-"))
    shared.chmod(0o777)
    env = _plain_env(runtime_dir)
    path = front.socket_path(env)
    planted, record = shared / "planted.sock", shared / "received"
    listener = (  # the other user's server: accepts, records how many bytes it got, answers "taken, 0"
        "import socket\n"
        f"s = socket.socket(socket.AF_UNIX); s.bind({str(planted)!r}); s.listen(1)\n"
        "c, _ = s.accept(); c.settimeout(2)\n"
        "try:\n    got = c.recv(1 << 16)\nexcept OSError:\n    got = b''\n"
        f"open({str(record)!r}, 'w').write(str(len(got)))\n"
        "c.sendall(b'A\\0\\0\\0\\0')\n")
    other = subprocess.Popen(["runuser", "-u", name, "--", "/usr/bin/python3", "-c", listener])
    try:
        deadline = time.monotonic() + 20
        while not planted.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.rename(planted, path)  # now at the user's own helper's name
        result = native.run("squeue", "--version", env=env)
        assert result.returncode == 0 and result.stdout.startswith("slurm"), result.stderr
        assert native.fallback_marks() == [f"squeue:{front.REFUSED}"]
        other.wait(20)
        assert record.read_text() == "0"  # not even the environment reached it
    finally:
        if other.poll() is None:
            other.kill()
        shutil.rmtree(shared, ignore_errors=True)
        subprocess.run(["userdel", name], capture_output=True, check=False)


@pytest.mark.slow
def test_calls_through_the_helper_match_the_python_commands(native, runtime_dir, slurm_cluster, tmp_path):
    env = command_env(slurm_cluster.url, slurm_cluster.secret_file, XDG_RUNTIME_DIR=str(runtime_dir))
    native.run("squeue", "--version", env=env)
    _wait_for_helper(front.socket_path(env))
    started = native.fallback_count()
    alone = {**env, front.HELPER_SWITCH: "0"}
    workdir = tmp_path / "work"
    workdir.mkdir()
    submitted = native.run("sbatch", "--parsable", env=env, cwd=workdir,
                           stdin=None, input="#!/bin/sh\n#SBATCH --job-name=native\n#SBATCH --hold\ntrue\n")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    for args in (["-j", job_id, "-o", "%i %j %t %Z"], ["-h", "-j", job_id], ["-j", "x"]):
        via = native.run("squeue", *args, env=env)
        own = subprocess.run([str(script("squeue")), *args], env=alone, capture_output=True, text=True, timeout=60)
        assert (via.stdout, via.stderr, via.returncode) == (own.stdout, own.stderr, own.returncode)
    assert native.run("squeue", "-h", "-j", job_id, "-o", "%j %Z", env=env).stdout.split() == ["native", str(workdir)]
    assert native.run("sacct", "-j", job_id, "-n", "-o", "JobName%20", env=env).stdout.strip() == "native"
    shown = native.run("corral", "show", job_id, "--json", env=env)
    assert shown.returncode == 0 and job_id in shown.stdout and "native" in shown.stdout, shown.stderr
    queued = native.run("corral", "queue", env=env)
    assert queued.returncode == 0 and job_id in queued.stdout
    corral_submit = native.run("corral", "submit", "--parsable", "--hold", "-o", "/dev/null", "--wrap", "true",
                               env=env, cwd=workdir)
    assert corral_submit.returncode == 0 and corral_submit.stdout.strip().isdigit(), corral_submit.stderr
    for cancelled in (job_id, corral_submit.stdout.strip()):
        assert native.run("scancel", cancelled, env=env).returncode == 0
    assert native.fallback_count() == started  # every call above went through the helper


@pytest.mark.slow
def test_ctrl_c_ends_the_call_and_the_helpers_child(native, runtime_dir, slurm_cluster):
    env = command_env(slurm_cluster.url, slurm_cluster.secret_file, XDG_RUNTIME_DIR=str(runtime_dir))
    native.run("squeue", "--version", env=env)
    path = front.socket_path(env)
    _wait_for_helper(path)
    helper_pid = _the_helper(path)
    watching = subprocess.Popen([str(native.bin / "squeue"), "-i", "1"], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not select.select([watching.stdout], [], [], 0.1)[0] and time.monotonic() < deadline:
        pass  # until squeue -i has shown the queue once
    running = _children(helper_pid)
    assert len(running) == 1, running  # the call's child; the next is forked when it ends or another call waits
    # Another call meanwhile is served by the helper at once (a child forked for it), not queued behind -i.
    other = native.run("squeue", "--version", env=env)
    assert other.returncode == 0 and native.fallback_count() == 1
    children = _settled_children(helper_pid, 2)
    assert running[0] in children and len(children) == 2, children  # -i's, and the next waits
    watching.send_signal(signal.SIGINT)
    assert watching.wait(10) == 130
    deadline = time.monotonic() + 10
    while running[0] in _children(helper_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_children(helper_pid)) == 1 and running[0] not in _children(helper_pid)  # the call ended there too
    assert native.fallback_count() == 1


def _the_helper(path: str) -> int:
    """The helper itself, not the child it keeps waiting (whose parent it is)."""
    pids = _helper_pids(path)
    parents = {int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1]) for pid in pids}
    (helper,) = [pid for pid in pids if pid in parents or len(pids) == 1]
    return helper


def _settled_children(pid: int, count: int, timeout_s: float = 10, steady_s: float = 0.3) -> list[int]:
    """pid's children once `count` of them have stayed the same for steady_s: a served call's child may still
    be ending for a moment while there are `count`, before the next one is forked beside it."""
    deadline = time.monotonic() + timeout_s
    seen, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = _children(pid)
        if now != seen:
            seen, since = now, time.monotonic()
        elif len(now) == count and time.monotonic() - since >= steady_s:
            return now
        time.sleep(0.05)
    return _children(pid)


def _children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def test_install_puts_the_front_end_before_the_console_scripts_and_is_repeatable(tmp_path):
    scripts, entry_points = tmp_path / "bin", tmp_path / "libexec"
    scripts.mkdir()
    for command in build_front.FRONTED:
        (scripts / command).write_text(f"#!{sys.executable}\nprint({command!r})\n")
    (scripts / "srun").write_text("#!/bin/sh\n")
    assert build_front.install(scripts, entry_points) == list(build_front.FRONTED)
    for command in build_front.FRONTED:
        assert (scripts / command).read_bytes()[:4] == build_front.ELF_MAGIC
        assert (entry_points / command).read_text() == f"#!{sys.executable}\nprint({command!r})\n"
    assert (scripts / "srun").read_text() == "#!/bin/sh\n"  # the others are not touched
    (scripts / "squeue").write_text("#!/bin/sh\n# pip wrote it again\n")
    build_front.install(scripts, entry_points)  # a reinstall: the new script goes behind the front-end too
    assert (entry_points / "squeue").read_text() == "#!/bin/sh\n# pip wrote it again\n"
    assert (scripts / "squeue").read_bytes()[:4] == build_front.ELF_MAGIC
    (entry_points / "sacct").unlink()
    with pytest.raises(build_front.BuildError, match="sacct"):
        build_front.install(scripts, entry_points)  # nothing to fall back on: refused before anything moved
    assert (scripts / "sacct").read_bytes()[:4] == build_front.ELF_MAGIC
