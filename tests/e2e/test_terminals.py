"""srun --pty end to end: a real controller and agent, srun typed into a real terminal (tmux), bash on a
pseudo-terminal on the node. The window size follows a resize, Ctrl-C and Ctrl-Z reach the remote
foreground job and leave the shell alive, Ctrl-D ends the shell, its exit status is srun's, full-screen
programs draw; as a new allocation and inside one (salloc); and without a terminal, Slurm's words."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from corral.protocol import API_PREFIX as API
from tests.e2e.harness import Cluster, wait_for
from tests.e2e.terminal_driver import Terminal
from tests.slurm.commands import SCRIPTS, Commands, command_env

pytestmark = pytest.mark.slow

REMOTE_SHELL = "srun --pty bash --norc --noprofile"


@pytest.fixture(scope="module")
def pty_cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("corral-pty"), nodes=2, gpus=1).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def terminal(pty_cluster, tmp_path):
    env = command_env(pty_cluster.url, pty_cluster.secret_file)
    env["PATH"] = f"{SCRIPTS}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.defpath)}"
    env["SHELL"] = "/bin/bash"
    env["TERM"] = "xterm"
    env = {k: v for k, v in env.items() if not k.startswith(("TMUX", "PYTEST", "COLUMNS", "LINES"))}
    term = Terminal(tmp_path, env, cols=100, rows=30)
    term.type(f"cd {tmp_path}")
    yield term
    term.close()


def remote_prompt(term: Terminal, marker: str) -> None:
    """Wait until the remote shell answers (it runs as step N.0 on a node)."""
    term.type(f'echo "{marker}=$SLURM_STEP_ID@$SLURMD_NODENAME"')
    term.wait_for(rf"^{marker}=0@node\d+$")


def newest_running(cluster: Cluster) -> int:
    """The job just started (an earlier test's allocation may still be ending)."""
    return max(j["id"] for j in cluster.http.get(f"{API}/jobs").json() if j["state"] == "RUNNING")


def test_srun_pty_bash_as_a_new_allocation(terminal):
    terminal.type(f'{REMOTE_SHELL}; echo "srun-exit=$?"')
    remote_prompt(terminal, "hello")
    terminal.type('echo "tty=$(tty) size=$(stty size)"')
    terminal.wait_for(r"^tty=/dev/pts/\d+ size=30 100$")

    terminal.resize(120, 40)
    terminal.type('echo "resized=$(stty size)"')
    terminal.wait_for(r"^resized=40 120$")

    terminal.type("sleep 100")
    terminal.wait_for(r"^\$ sleep 100$")
    terminal.key("C-c")
    terminal.type('echo "after-interrupt=$?"')
    terminal.wait_for(r"^after-interrupt=130$", timeout_s=10)  # killed by SIGINT, and the shell lives on

    terminal.type("sleep 101")
    terminal.wait_for(r"^\$ sleep 101$")
    terminal.key("C-z")
    terminal.wait_for(r"Stopped\s+sleep 101", timeout_s=10)
    terminal.type('kill -9 %1; echo "suspended-killed"')
    terminal.wait_for(r"^suspended-killed$")

    terminal.type("exit 3")
    terminal.wait_for(r"^srun-exit=3$")
    terminal.wait_for(r"^srun: error: node\d: task 0: Exited with exit code 3$")
    terminal.type('echo "local=$(stty -a | grep -o -- "-icanon\\|icanon" | head -1)"')
    terminal.wait_for(r"^local=icanon$")  # the local terminal is cooked again


def test_full_screen_program_and_ctrl_d_inside_salloc(terminal):
    terminal.type('salloc -N1; echo "salloc-exit=$?"')
    terminal.wait_for(r"salloc: Granted job allocation \d+")
    terminal.type(f'{REMOTE_SHELL}; echo "srun-exit=$?"')
    remote_prompt(terminal, "inside")

    terminal.type("vi -u NONE")  # full screen: its tildes fill every row but the last
    terminal.wait_for(r"(^~.*\n){25,}")
    terminal.type(":q!")
    terminal.wait_gone(r"(^~.*\n){25,}")  # vi flushes what is typed before it has left (TCSAFLUSH)
    terminal.type('echo "vi-done"')
    terminal.wait_for(r"^vi-done$")

    terminal.key("C-d")  # end of file to the remote shell: it exits 0
    terminal.wait_for(r"^srun-exit=0$")
    terminal.type("exit 4")  # the salloc shell, on this host
    terminal.wait_for(r"^salloc-exit=4$")
    terminal.wait_for(r"salloc: Relinquishing job allocation \d+")


def test_pty_without_a_terminal_prints_slurms_error_and_runs_without_one(pty_cluster, tmp_path):
    result = Commands(pty_cluster, tmp_path)("srun", "--pty", "sh", "-c", "tty; echo done")
    assert result.stderr.splitlines()[:2] == [
        "srun: error: ioctl(TIOCGWINSZ): Inappropriate ioctl for device",
        "srun: error: Not using a pseudo-terminal, disregarding --pty option"], result
    assert result.stdout == "not a tty\ndone\n", result
    assert result.code == 0, result


def test_salloc_runs_the_shell_on_the_first_node_with_use_interactive_step(tmp_path_factory, tmp_path):
    config = 'kill_grace_s = 2\nnode_timeout_s = 15\nlaunch_parameters = ["use_interactive_step"]\n'
    cluster = Cluster(tmp_path_factory.mktemp("corral-pty-step"), nodes=2, gpus=1, config=config).start()
    term = None
    try:
        env = command_env(cluster.url, cluster.secret_file)
        env["PATH"] = f"{SCRIPTS}{os.pathsep}{env.get('PATH', os.defpath)}"
        env |= {"SHELL": "/bin/bash", "TERM": "xterm"}
        term = Terminal(tmp_path, {k: v for k, v in env.items() if not k.startswith(("TMUX", "PYTEST"))})
        term.type('salloc -N2; echo "salloc-exit=$?"')
        term.wait_for(r"salloc: Granted job allocation \d+")
        term.type('echo "where=$SLURMD_NODENAME step=$SLURM_STEP_ID nodes=$SLURM_JOB_NODELIST tty=$(tty)"')
        term.wait_for(r"^where=node1 step=0 nodes=node\[1-2\] tty=/dev/pts/\d+$")
        term.type("exit 5")
        term.wait_for(r"^salloc-exit=5$")
    finally:
        if term is not None:
            term.close()
        cluster.stop()


def test_sattach_gets_a_running_step_s_output_sends_it_stdin_and_ends_with_it(pty_cluster, tmp_path):
    cmd = Commands(pty_cluster, tmp_path)
    ready = tmp_path / "ready"
    script = f"touch {ready}; read line; echo \"got $line\"; exit 6"
    srun = subprocess.Popen([str(SCRIPTS / "srun"), "-N1", "sh", "-c", script], env=cmd.env, cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(ready.exists, 30, message="the step started")
        job_id = newest_running(pty_cluster)
        if os.geteuid() == 0:
            assert_others_may_not_attach(pty_cluster, job_id)
        attached = cmd("sattach", f"{job_id}.0", stdin="hello\n")
        assert (attached.code, attached.stdout) == (6, "got hello\n"), attached
        out, err = srun.communicate(timeout=30)
    finally:
        srun.kill()
    assert (srun.returncode, out) == (6, b"got hello\n"), err  # srun saw the same, and the same end
    late = cmd("sattach", f"{job_id}.0")
    assert (late.code, late.stderr) == (1, "sattach: error: Could not get job step info: Job/step already "
                                           "completing or completed\n"), late


def assert_others_may_not_attach(cluster: Cluster, job_id: int) -> None:
    """Another real user (useradd, named with pty, removed afterwards) with a token of their own."""
    name = f"ptyo{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-d", "/nonexistent", "-s", "/bin/sh", name], check=True)
    try:
        token = cluster.http.post(f"{API}/tokens", json={"user": name, "expires_s": 600}).json()["token"]
        reply = cluster.http.post(f"{API}/jobs/{job_id}/steps/0/attach", headers={"Authorization": f"Bearer {token}"},
                                  json={"io_host": "127.0.0.1", "io_port": 9, "io_token": "x" * 32})
        assert reply.status_code == 403, reply.text
        assert "only its owner may attach" in reply.json()["detail"]
    finally:
        subprocess.run(["userdel", name], check=False)


def test_an_agent_restart_hangs_the_terminal_up_and_the_adopted_step_ends(tmp_path_factory, tmp_path):
    """The terminal's master end dies with the agent: the remote shell gets SIGHUP, srun loses the node,
    and the restarted agent reports the adopted step's end (decision 0012)."""
    cluster = Cluster(tmp_path_factory.mktemp("corral-pty-adopt"), nodes=1, gpus=1).start()
    term = None
    try:
        env = command_env(cluster.url, cluster.secret_file)
        env["PATH"] = f"{SCRIPTS}{os.pathsep}{env.get('PATH', os.defpath)}"
        term = Terminal(tmp_path, {k: v for k, v in env.items() if not k.startswith(("TMUX", "PYTEST"))}
                        | {"SHELL": "/bin/bash", "TERM": "xterm"})
        term.type(f'{REMOTE_SHELL}; echo "srun-exit=$?"')
        remote_prompt(term, "before")
        job_id = newest_running(cluster)
        cluster.kill_agent("node1")
        term.wait_for(r"^srun-exit=1$")
        assert "srun: error: node1: task 0: connection lost" in term.screen()
        cluster.start_agent("node1")
        job = cluster.wait_state(job_id, "COMPLETED", "FAILED", "CANCELLED", timeout_s=30)
        (step,) = [s for s in job["steps"] if s["step_id"] == "0"]
        # srun, having lost the node, gave the allocation back, which cancels its live steps; the restarted
        # agent's report of the adopted task still says how it ended: by the terminal's hang-up.
        assert (step["state"], step["exit_code"], step["exit_signal"]) == ("CANCELLED", 0, signal.SIGHUP), step
    finally:
        if term is not None:
            term.close()
        cluster.stop()


def test_sattach_pty_types_into_a_running_srun_pty_shell(pty_cluster, terminal, tmp_path):
    terminal.type(f'{REMOTE_SHELL}; echo "srun-exit=$?"')
    remote_prompt(terminal, "first")
    job_id = newest_running(pty_cluster)
    second_dir = tmp_path / "second"
    second_dir.mkdir()
    env = command_env(pty_cluster.url, pty_cluster.secret_file)
    env["PATH"] = f"{SCRIPTS}{os.pathsep}{env.get('PATH', os.defpath)}"
    second = Terminal(second_dir, {k: v for k, v in env.items() if not k.startswith(("TMUX", "PYTEST"))})
    try:
        second.type(f'sattach --pty {job_id}.0; echo "sattach-exit=$?"')
        time.sleep(1)  # attached once the agent connects: what is typed before goes nowhere
        second.type('echo "typed-in-$((6 * 7))"')
        for screen in (second, terminal):
            screen.wait_for(r"^typed-in-42$")
        terminal.type("exit 3")
        terminal.wait_for(r"^srun-exit=3$")
        second.wait_for(r"^sattach-exit=3$")
    finally:
        second.close()
